//! The simulation's invariants, checked after every step and at the end.
//!
//! - One leader per term: every leader seen (a node in state leader, or a
//!   committed vote naming one) is recorded with its term, forever; a
//!   second node for the same term is a violation.
//! - Committed entries never change: the `(term, digest)` of every entry at
//!   or below a node's committed index is recorded by index the first time
//!   any node shows it and compared on every node ever after (a restarted
//!   node's whole committed prefix is read again).
//! - Logs match: the digest of every `(index, term)` any node's log ever
//!   held is recorded and must be the same wherever it appears, committed
//!   or not.
//! - Leader completeness: a node leading the newest term seen holds every
//!   entry ever committed, as committed (so no node ever exposed an entry a
//!   later leader's log lacks).
//! - Offsets are dense: a data entry's batch starts where the data entries
//!   before it end; blank and membership entries take no offsets.
//! - Nothing is exposed early: a node's state machine makes visible only
//!   offsets below the end of its committed entries.
//! - Nothing is purged: the groups never build snapshots, so the log is
//!   never purged behind one.
//! - At the end (everything healed and converged), every replica's
//!   committed messages, read back through the partition's message reads,
//!   are the same dense sequence, and each attempt of the ledger appears
//!   as its outcome allows: acknowledged ones exactly once at the offsets
//!   they were answered, in each client's order; rejected ones never;
//!   unknown ones at most once; and every acknowledged entry is at the
//!   index it was answered, of its term, with the same bytes on every
//!   replica.
//!
//! Must not: change a log (it only reads), wait on a log another task
//! holds (a node whose log is busy is checked on the next step), or trust
//! what a node says about itself over what its disk holds.

use super::workload::{Ledger, Outcome, attempt_of};
use iggyd_storage::StorageError;
use iggyd_storage::raft::{RaftLog, StoredBody};
use iggyd_storage::sim::SimIo;
use iggyd_wire::batch::{BatchHeader, frames};
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// What an entry holds, as compared across nodes and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Digest {
    term: u64,
    /// A hash of the kind and bytes (`DefaultHasher::new()` has fixed
    /// keys, so it is the same in every run).
    hash: u64,
    /// A data entry's batch: base offset, messages, server timestamp (to
    /// say how two entries differ).
    batch: Option<(u64, u32, u64)>,
}

fn digest(term: u64, body: &StoredBody) -> Digest {
    let mut hasher = DefaultHasher::new();
    match body {
        StoredBody::Blank => 0u8.hash(&mut hasher),
        StoredBody::Data(bytes) => {
            1u8.hash(&mut hasher);
            bytes.hash(&mut hasher);
        }
        StoredBody::Membership(bytes) => {
            2u8.hash(&mut hasher);
            bytes.hash(&mut hasher);
        }
        StoredBody::Offsets(bytes) => {
            3u8.hash(&mut hasher);
            bytes.hash(&mut hasher);
        }
        StoredBody::Purge(below) => {
            4u8.hash(&mut hasher);
            below.hash(&mut hasher);
        }
    }
    let batch = match body {
        StoredBody::Data(bytes) => BatchHeader::decode(bytes).ok().map(|header| {
            (
                header.base_offset,
                header.message_count,
                header.base_timestamp,
            )
        }),
        StoredBody::Blank
        | StoredBody::Membership(_)
        | StoredBody::Offsets(_)
        | StoredBody::Purge(_) => None,
    };
    Digest {
        term,
        hash: hasher.finish(),
        batch,
    }
}

/// What the checks saw, for the coverage summary.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckStats {
    pub entries_read: u64,
    /// Entries a node held that were later gone or replaced (its
    /// uncommitted tail cut by a new leader or lost in a crash).
    pub entries_replaced: u64,
    pub committed_entries: u64,
}

/// The invariants' memory.
#[derive(Debug, Default)]
pub struct Checker {
    /// Term → the one node that led it.
    leaders: BTreeMap<u64, u64>,
    /// Index → the entry committed there.
    committed: BTreeMap<u64, Digest>,
    /// `(index, term)` → the entry, for every entry ever seen.
    seen: BTreeMap<(u64, u64), Digest>,
    /// Node → the first index of its committed prefix not yet verified.
    verified: BTreeMap<u64, u64>,
    /// Node → the terms of its uncommitted tail at the last check.
    tails: BTreeMap<u64, BTreeMap<u64, u64>>,
    /// `(leader, term)` → the first committed index not yet found in its
    /// log.
    leader_verified: BTreeMap<(u64, u64), u64>,
    /// Retention runs: logs are purged through snapshots.
    pub snapshots: bool,
    pub violations: Vec<String>,
    pub stats: CheckStats,
}

impl Checker {
    /// Terms with a known leader.
    pub fn terms_led(&self) -> usize {
        self.leaders.len()
    }

    /// `leader` led `term` (seen as leader, or named by a committed vote).
    pub fn leader_seen(&mut self, term: u64, leader: u64) {
        match self.leaders.get(&term) {
            None => {
                self.leaders.insert(term, leader);
            }
            Some(&known) if known != leader => self.violations.push(format!(
                "two leaders in term {term}: node {known} and node {leader}"
            )),
            Some(_) => {}
        }
    }

    /// The node restarted: its whole log is verified again.
    pub fn restarted(&mut self, node: u64) {
        self.verified.remove(&node);
        if let Some(tail) = self.tails.remove(&node) {
            self.stats.entries_replaced += tail.len() as u64;
        }
    }

    /// Checks one node's log: its committed prefix not verified yet and
    /// its uncommitted tail, against everything seen before, and what its
    /// state machine made visible (`applied_end`, one past the last
    /// offset; up to `installed_end`, the offset of a snapshot its state
    /// machine installed, which the log follows once openraft purges it).
    pub async fn check_log(
        &mut self,
        node: u64,
        log: &RaftLog<SimIo>,
        applied_end: u64,
        installed_end: u64,
    ) -> Result<(), StorageError> {
        match log.purged() {
            Some(purged) if !self.snapshots => self.violations.push(format!(
                "node {node}: its log was purged through {purged:?} (no snapshot is ever built)"
            )),
            // A purge point is a committed entry (a snapshot's).
            Some((index, term)) => match self.committed.get(&index) {
                Some(known) if known.term != term => self.violations.push(format!(
                    "node {node}: purged through ({index}, {term}) where entry {index} of term {} was committed",
                    known.term
                )),
                _ => {}
            },
            None => {}
        }
        let committed_end = match log.committed() {
            Some((committed, _)) => log.messages_end_through(committed).await?,
            None => log.partition().first_offset(),
        };
        if applied_end > committed_end.max(installed_end) {
            self.violations.push(format!(
                "node {node}: offsets below {applied_end} are visible, its committed entries end at {committed_end}"
            ));
        }
        let Some((last, _)) = log.last() else {
            return Ok(());
        };
        let committed = log.committed();
        let first = log.first_index().unwrap_or(0);
        let after_purge = log.purged().map_or(0, |(index, _)| index + 1);
        let from = self
            .verified
            .get(&node)
            .copied()
            .unwrap_or(0)
            .max(first)
            .max(after_purge);
        let mut next_offset = match from.checked_sub(1) {
            Some(before) => log.messages_end_through(before).await?,
            None => log.partition().first_offset(),
        };
        let previous_tail = self.tails.remove(&node).unwrap_or_default();
        let mut tail = BTreeMap::new();
        for index in from..=last {
            let Some(entry) = log.get(index).await? else {
                self.violations.push(format!(
                    "node {node}: entry {index} is missing below {last}"
                ));
                return Ok(());
            };
            self.stats.entries_read += 1;
            let entry_digest = digest(entry.term, &entry.body);
            if let StoredBody::Data(bytes) = &entry.body {
                match BatchHeader::decode(bytes) {
                    Ok(header) if header.base_offset == next_offset => {
                        next_offset += u64::from(header.message_count);
                    }
                    Ok(header) => self.violations.push(format!(
                        "node {node}: entry {index} starts at offset {} where {next_offset} was next",
                        header.base_offset
                    )),
                    Err(error) => self
                        .violations
                        .push(format!("node {node}: entry {index} is not a batch: {error}")),
                }
            }
            match self.seen.get(&(index, entry.term)) {
                None => {
                    self.seen.insert((index, entry.term), entry_digest);
                }
                Some(seen) if *seen != entry_digest => self.violations.push(format!(
                    "logs differ: node {node} holds another entry {index} of term {}: {entry_digest:?} where {seen:?} was seen",
                    entry.term
                )),
                Some(_) => {}
            }
            if committed.is_some_and(|(committed, _)| index <= committed) {
                match self.committed.get(&index) {
                    None => {
                        self.committed.insert(index, entry_digest);
                        self.stats.committed_entries += 1;
                    }
                    Some(known) if *known != entry_digest => self.violations.push(format!(
                        "committed entry {index} changed: node {node} holds {entry_digest:?} where {known:?} was committed"
                    )),
                    Some(_) => {}
                }
            } else {
                tail.insert(index, entry.term);
            }
        }
        if let Some((index, term)) = committed {
            match log.term_of(index).await? {
                Some(held) if held == term => {}
                held => self.violations.push(format!(
                    "node {node}: committed ({index}, {term}) but its log holds term {held:?} there"
                )),
            }
            self.verified.insert(node, index + 1);
        }
        self.stats.entries_replaced += previous_tail
            .iter()
            .filter(|(index, term)| {
                tail.get(index) != Some(term)
                    && committed.is_none_or(|(committed, _)| **index > committed)
            })
            .count() as u64;
        self.tails.insert(node, tail);
        Ok(())
    }
}

impl Checker {
    /// The newest term any check saw: of a leader, or of an entry in a log.
    pub fn newest_term(&self) -> u64 {
        let led = self.leaders.keys().next_back().copied().unwrap_or(0);
        let held = self.seen.keys().map(|(_, term)| *term).max().unwrap_or(0);
        led.max(held)
    }

    /// Leader completeness: `node`, leading `term`, the newest term seen,
    /// holds every entry committed so far (those not checked for this
    /// term yet), as it was committed.
    pub async fn check_leader(
        &mut self,
        node: u64,
        term: u64,
        log: &RaftLog<SimIo>,
    ) -> Result<(), StorageError> {
        if term < self.newest_term() {
            return Ok(());
        }
        // What its snapshot covers it holds as the snapshot.
        let after_purge = log.purged().map_or(0, |(index, _)| index + 1);
        let from = self
            .leader_verified
            .get(&(node, term))
            .copied()
            .unwrap_or(0)
            .max(after_purge);
        let committed: Vec<(u64, Digest)> = self
            .committed
            .range(from..)
            .map(|(index, digest)| (*index, *digest))
            .collect();
        for (index, known) in committed {
            let held = log
                .get(index)
                .await?
                .map(|entry| digest(entry.term, &entry.body));
            if held != Some(known) {
                self.violations.push(format!(
                    "node {node} leads term {term} without committed entry {index}: it holds {held:?} where {known:?} was committed"
                ));
                return Ok(());
            }
            self.leader_verified.insert((node, term), index + 1);
        }
        Ok(())
    }
}

/// One committed message: its offset and id.
pub type Message = (u64, u128);

/// The committed messages of a node, read back through the partition's
/// message reads (not the entry table): `(offset, id)` for each message
/// below `end`.
pub async fn committed_messages(log: &RaftLog<SimIo>, end: u64) -> Result<Vec<Message>, String> {
    let partition = log.partition();
    let mut offset = partition.first_offset();
    let mut messages = Vec::new();
    while offset < end {
        let read = partition
            .read_by_offset(offset, u32::MAX, 1 << 20)
            .await
            .map_err(|error| format!("reading offset {offset}: {error}"))?;
        if read.message_count == 0 {
            return Err(format!("nothing read at offset {offset} below {end}"));
        }
        let bytes = read.records_bytes();
        let mut position = 0usize;
        while position < bytes.len() {
            let record = &bytes[position..];
            let header =
                BatchHeader::decode(record).map_err(|error| format!("a record: {error}"))?;
            let length = header.batch_length as usize;
            let record = record
                .get(..length)
                .ok_or_else(|| format!("a record of {length} bytes is cut"))?;
            for frame in frames(record).map_err(|error| format!("frames: {error}"))? {
                let frame = frame.map_err(|error| format!("a frame: {error}"))?;
                if frame.offset < end {
                    messages.push((frame.offset, frame.header.id));
                }
            }
            position += length;
            offset = header.base_offset + u64::from(header.message_count);
        }
    }
    Ok(messages)
}

/// Checks the healed cluster's messages against the ledger; returns the
/// violations.
///
/// Retention may have deleted each replica's oldest messages (whole
/// batches, up to its own purge point): each replica's messages are dense
/// from its first, the replicas agree wherever they all hold messages, and
/// the acknowledged attempts are checked against the replica that holds
/// the most (an attempt below its first message was deleted).
pub fn check_messages(
    ledger: &Ledger,
    replicas: &BTreeMap<u64, Vec<Message>>,
    starts: &BTreeMap<u64, u64>,
) -> Vec<String> {
    let mut violations = Vec::new();
    // Where a replica's messages start: its first, or where it serves
    // from when a purge left it none.
    let first_of = |node: u64, messages: &Vec<Message>| {
        messages.first().map_or_else(
            || starts.get(&node).copied().unwrap_or(0),
            |(offset, _)| *offset,
        )
    };
    let Some((&first_node, messages)) = replicas
        .iter()
        .min_by_key(|(node, messages)| (first_of(**node, messages), **node))
    else {
        return vec!["no replica to read".to_string()];
    };
    let floor = replicas
        .iter()
        .map(|(node, messages)| first_of(*node, messages))
        .max()
        .unwrap_or(0);
    let held_from = |messages: &Vec<Message>| -> Vec<Message> {
        messages
            .iter()
            .filter(|(offset, _)| *offset >= floor)
            .copied()
            .collect()
    };
    let common = held_from(messages);
    for (node, other) in replicas {
        let other = held_from(other);
        if other != common {
            let at = other
                .iter()
                .zip(&common)
                .position(|(a, b)| a != b)
                .unwrap_or(other.len().min(common.len()));
            violations.push(format!(
                "node {node}'s committed messages from offset {floor} differ from node {first_node}'s at position {at} ({} and {} messages)",
                other.len(),
                common.len()
            ));
        }
    }
    // Dense offsets from each replica's first.
    for (node, other) in replicas {
        let first = first_of(*node, other);
        for (position, (offset, _)) in other.iter().enumerate() {
            if *offset != first + position as u64 {
                violations.push(format!(
                    "node {node}: message {position} has offset {offset} after {first}: offsets are not dense"
                ));
                break;
            }
        }
    }
    let deleted_below = first_of(first_node, messages);
    // Where each attempt's messages are.
    let mut found: BTreeMap<u64, Vec<(u32, u64)>> = BTreeMap::new();
    for (offset, id) in messages {
        let (attempt, index) = attempt_of(*id);
        found.entry(attempt).or_default().push((index, *offset));
    }
    let mut acknowledged_offsets: BTreeMap<u64, Vec<(u64, u64)>> = BTreeMap::new();
    for (attempt, record) in ledger.attempts.iter().enumerate() {
        let attempt = attempt as u64;
        let places = found.remove(&attempt).unwrap_or_default();
        let whole = places.len() == record.messages as usize
            && places.iter().enumerate().all(|(at, (index, offset))| {
                *index == at as u32 && *offset == places[0].1 + at as u64
            });
        if !places.is_empty() && !whole {
            violations.push(format!(
                "attempt {attempt} (client {}, batch {}) appears as {places:?}, not once whole",
                record.client, record.sequence
            ));
            continue;
        }
        match record.outcome {
            Outcome::Acknowledged { appended, log_id } => {
                let expected = appended.base_offset;
                match places.first() {
                    Some((_, offset)) if *offset == expected => acknowledged_offsets
                        .entry(record.client)
                        .or_default()
                        .push((record.sequence, expected)),
                    Some((_, offset)) => violations.push(format!(
                        "acknowledged attempt {attempt} (entry {log_id}) was answered offset {expected} but is at {offset}"
                    )),
                    // Deleted by retention on every replica.
                    None if expected < deleted_below => {}
                    None => violations.push(format!(
                        "acknowledged attempt {attempt} (client {}, batch {}, entry {log_id}, offsets {appended}) is missing",
                        record.client, record.sequence
                    )),
                }
            }
            Outcome::Rejected if !places.is_empty() => violations.push(format!(
                "attempt {attempt} was rejected (never appended) but appears at {places:?}"
            )),
            Outcome::Rejected | Outcome::Unknown | Outcome::Pending => {}
        }
    }
    for (attempt, places) in found {
        violations.push(format!(
            "messages of attempt {attempt} that no client made: {places:?}"
        ));
    }
    for (client, batches) in acknowledged_offsets {
        if batches.windows(2).any(|pair| pair[0].1 >= pair[1].1) {
            violations.push(format!(
                "client {client}'s acknowledged batches are out of order: {batches:?}"
            ));
        }
    }
    violations
}
