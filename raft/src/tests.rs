//! Tests of the adapter: openraft's own storage test suite on a partition's
//! Raft log (on the simulated disk), and one node running a real openraft
//! group on monoio over a real directory: proposals committed through
//! consensus become dense messages with the offsets the proposer was
//! answered, blank and membership entries take no offsets, and a restart
//! keeps the vote, the log and the offsets, and goes on where it stopped;
//! the log store over a backend completing openraft's writes in order.

use crate::log_store::LogStore;
use crate::state_machine::{Applied, StateMachine};
use crate::{Appended, PartitionRaft, Proposal};
use iggyd_storage::BufferPool;
use iggyd_storage::io::MonoioIo;
use iggyd_storage::partition_log::{Clock, PartitionConfig, SystemClock};
use iggyd_storage::raft::RaftLog;
use iggyd_storage::sim::{SimClock, SimIo};
use iggyd_wire::batch::{BatchHeader, MessageSpec, encode_producer_batch, stamp};
use openraft::errors::{RPCError, ReplicationClosed, StreamingError, Unreachable};
use openraft::network::RPCOption;
use openraft::network::v2::RaftNetworkV2;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, SnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::{Config, RaftNetworkFactory};
use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

pub(crate) fn runtime() -> monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>> {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
        .enable_timer()
        .build()
        .expect("a monoio runtime")
}

fn config() -> PartitionConfig {
    PartitionConfig::new(0, 64 * 1024).with_read_window(16 * 1024)
}

/// Builds each suite test a fresh partition on its own simulated disk.
struct SimBuilder;

impl StoreBuilder<PartitionRaft, LogStore<SimIo>, StateMachine, ()> for SimBuilder {
    async fn build(
        &self,
    ) -> Result<((), LogStore<SimIo>, StateMachine), openraft::StorageError<PartitionRaft>> {
        let io = SimIo::new(7);
        let clock: Rc<dyn Clock> = Rc::new(SimClock::new(1_700_000_000_000_000));
        let (log, _) = RaftLog::open(
            io,
            Path::new("/data/p"),
            config(),
            clock,
            BufferPool::new(1 << 20),
        )
        .await
        .expect("open a partition's Raft log");
        Ok((
            (),
            LogStore::new(log),
            StateMachine::new(Rc::new(Applied::default())),
        ))
    }
}

// Proves the log store and state machine pass openraft's own storage test
// suite (log state, reads, appends, truncation, purge, vote, membership
// tracking, applying), which is how the library says a storage is right.
#[test]
fn openraft_storage_suite_passes() {
    runtime().block_on(async {
        Suite::test_all(SimBuilder)
            .await
            .expect("openraft's storage suite");
    });
}

/// A network that reaches no one: a group of one never calls it.
struct Alone;

impl RaftNetworkFactory<PartitionRaft> for Alone {
    type Network = Alone;

    async fn new_client(&mut self, _target: u64, _node: &openraft::impls::BasicNode) -> Alone {
        Alone
    }
}

fn unreachable() -> Unreachable<PartitionRaft> {
    Unreachable::new(&std::io::Error::other("a group of one has no peer"))
}

impl RaftNetworkV2<PartitionRaft> for Alone {
    type SnapshotData = std::io::Cursor<Vec<u8>>;

    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<PartitionRaft>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<PartitionRaft>, RPCError<PartitionRaft>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<PartitionRaft>,
        _option: RPCOption,
    ) -> Result<VoteResponse<PartitionRaft>, RPCError<PartitionRaft>> {
        Err(RPCError::Unreachable(unreachable()))
    }

    async fn full_snapshot(
        &mut self,
        _vote: crate::Vote,
        _snapshot: openraft::alias::SnapshotOf<PartitionRaft, Self::SnapshotData>,
        _cancel: impl std::future::Future<Output = ReplicationClosed> + 'static,
        _option: RPCOption,
    ) -> Result<SnapshotResponse<PartitionRaft>, StreamingError<PartitionRaft>> {
        Err(StreamingError::Unreachable(unreachable()))
    }
}

/// A batch of `messages` stamped for `base_offset`, payloads naming their
/// offsets.
fn proposal(base_offset: u64, messages: u32) -> Proposal {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: u128::from(index) + 1,
            timestamp_delta: index,
            payload: format!("message {}", base_offset + u64::from(index)).into_bytes(),
            user_headers: Vec::new(),
        })
        .collect();
    let mut bytes = encode_producer_batch(1, &specs);
    stamp(
        &mut bytes,
        0,
        base_offset,
        1_700_000_000_000_000 + base_offset,
    )
    .expect("stamp");
    Proposal::Batch(bytes.into())
}

type Raft = openraft::Raft<PartitionRaft, StateMachine>;

/// Opens the partition in `dir` and starts its group of one on this node;
/// returns the group and the shared log.
async fn start(dir: &Path) -> (Raft, LogStore<MonoioIo>, Rc<Applied>) {
    let clock: Rc<dyn Clock> = Rc::new(SystemClock);
    let (log, _) = RaftLog::open(MonoioIo, dir, config(), clock, BufferPool::new(1 << 20))
        .await
        .expect("open");
    let store = LogStore::new(log);
    let applied = Rc::new(Applied::default());
    let config = Arc::new(
        Config {
            heartbeat_interval: 50,
            election_timeout_min: 150,
            election_timeout_max: 300,
            ..Default::default()
        }
        .validate()
        .expect("a valid config"),
    );
    let raft = Raft::new(
        1,
        config,
        Alone,
        store.clone(),
        StateMachine::new(applied.clone()),
    )
    .await
    .expect("start the group");
    (raft, store, applied)
}

// Proves one node commits proposals through a real openraft group on
// monoio: each write is answered with the offsets its messages got, the
// partition's messages are exactly the proposals' (dense, no blank or
// membership entry among them), the committed offset follows, and after a
// restart the node leads again, keeps everything, and continues the
// offsets.
#[test]
fn one_node_commits_proposals_and_keeps_them_across_a_restart() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let partition = dir.path().join("partitions/1");
    runtime().block_on(async {
        let (raft, store, applied) = start(&partition).await;
        let members = std::collections::BTreeMap::from([(
            1u64,
            openraft::impls::BasicNode {
                addr: "127.0.0.1:8091".to_string(),
            },
        )]);
        raft.initialize(members).await.expect("initialize");
        let mut next = 0u64;
        for messages in [3u32, 1, 5] {
            let written = raft
                .client_write(proposal(next, messages))
                .await
                .expect("write");
            assert_eq!(
                written.response(),
                &Appended {
                    base_offset: next,
                    last_offset: next + u64::from(messages) - 1
                }
            );
            next += u64::from(messages);
        }
        assert_eq!(applied.committed_next_offset.get(), 9);
        {
            let log = store.log();
            let log = log.lock().await;
            assert_eq!(
                log.partition().next_offset(),
                9,
                "only the proposals' messages"
            );
            let read = log
                .partition()
                .read_by_offset(0, 100, u64::MAX)
                .await
                .expect("read");
            assert_eq!(read.message_count, 9);
            assert_eq!(read.records, 3);
        }
        raft.shutdown().await.expect("shutdown");
        let log = store.log();
        log.lock().await.close().await.expect("close");
    });
    runtime().block_on(async {
        let (raft, store, applied) = start(&partition).await;
        raft.wait(Some(std::time::Duration::from_secs(10)))
            .current_leader(1, "node 1 leads again")
            .await
            .expect("a leader after restart");
        let written = raft
            .client_write(proposal(9, 2))
            .await
            .expect("write after restart");
        assert_eq!(written.response().base_offset, 9);
        assert_eq!(applied.committed_next_offset.get(), 11);
        let log = store.log();
        let log = log.lock().await;
        let read = log
            .partition()
            .read_by_offset(0, 100, u64::MAX)
            .await
            .expect("read");
        assert_eq!(read.message_count, 11);
        let first = BatchHeader::decode(&read.records_bytes()).expect("a batch");
        assert_eq!(first.base_offset, 0);
        raft.shutdown().await.expect("shutdown");
    });
}

/// A backend over a shared log, as the pump is for the daemon: what the
/// log store asks, performed on the log (a data entry whose base offset
/// does not continue the log takes the next one, as a leader's does).
#[derive(Clone)]
struct SharedBackend {
    log: Rc<futures_util::lock::Mutex<RaftLog<SimIo>>>,
}

impl crate::backend::LogBackend for SharedBackend {
    async fn state(&self) -> Result<crate::backend::BackendState, String> {
        let log = self.log.lock().await;
        Ok(crate::backend::BackendState {
            last: log.last(),
            purged: log.purged(),
            committed: log.committed(),
            vote: log.vote().map(<[u8]>::to_vec),
        })
    }

    async fn append(
        &self,
        entries: Vec<iggyd_storage::raft::StoredEntry>,
        flushed: crate::backend::FlushedCallback,
    ) -> Result<(), String> {
        use iggyd_storage::raft::{EntryBody, StoredBody};
        let mut log = self.log.lock().await;
        for entry in entries {
            let result = match entry.body {
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
                    let mut bytes = Vec::from(bytes);
                    let next = log.partition().next_offset();
                    let header = BatchHeader::decode(&bytes).map_err(|e| e.to_string())?;
                    if header.base_offset != next {
                        stamp(&mut bytes, header.partition_id, next, header.base_timestamp)
                            .map_err(|e| e.to_string())?;
                    }
                    let len = bytes.len();
                    let batch = iggyd_wire::batch::ValidBatch::new(bytes, 0..len)
                        .map_err(|e| e.to_string())?;
                    log.append(entry.index, entry.term, EntryBody::Data(&batch))
                        .await
                }
            };
            result.map_err(|e| e.to_string())?;
        }
        let synced = log.sync().await.map_err(|e| e.to_string());
        flushed(synced.clone());
        synced
    }

    async fn truncate_after(&self, keep: Option<u64>) -> Result<(), String> {
        let mut log = self.log.lock().await;
        log.truncate_after(keep).await.map_err(|e| e.to_string())
    }

    async fn purge_through(&self, through: iggyd_storage::raft::LogPosition) -> Result<(), String> {
        let mut log = self.log.lock().await;
        log.purge_through(through).await.map_err(|e| e.to_string())
    }

    async fn save_vote(&self, vote: Vec<u8>) -> Result<(), String> {
        let mut log = self.log.lock().await;
        log.save_vote(&vote).await.map_err(|e| e.to_string())
    }

    async fn save_committed(
        &self,
        committed: Option<iggyd_storage::raft::LogPosition>,
    ) -> Result<(), String> {
        self.log.lock().await.set_committed(committed);
        Ok(())
    }

    async fn read(
        &self,
        first: u64,
        end: u64,
        bytes_max: u64,
    ) -> Result<Vec<iggyd_storage::raft::StoredEntry>, String> {
        let mut log = self.log.lock().await;
        log.write_pending().await.map_err(|e| e.to_string())?;
        log.read_range(first, end, bytes_max)
            .await
            .map_err(|e| e.to_string())
    }
}

/// Builds each suite test a fresh backend on its own simulated disk.
struct BackendBuilder;

impl StoreBuilder<PartitionRaft, crate::backend::BackendLogStore<SharedBackend>, StateMachine, ()>
    for BackendBuilder
{
    async fn build(
        &self,
    ) -> Result<
        (
            (),
            crate::backend::BackendLogStore<SharedBackend>,
            StateMachine,
        ),
        openraft::StorageError<PartitionRaft>,
    > {
        let io = SimIo::new(11);
        let clock: Rc<dyn Clock> = Rc::new(SimClock::new(1_700_000_000_000_000));
        let (log, _) = RaftLog::open(
            io,
            Path::new("/data/p"),
            config(),
            clock,
            BufferPool::new(1 << 20),
        )
        .await
        .expect("open a partition's Raft log");
        let backend = SharedBackend {
            log: Rc::new(futures_util::lock::Mutex::new(log)),
        };
        Ok((
            (),
            crate::backend::BackendLogStore::new(backend),
            StateMachine::new(Rc::new(Applied::default())),
        ))
    }
}

// Proves the log store over a backend (what the daemon's pump is) passes
// openraft's own storage suite, like the one over a shared log.
#[test]
fn openraft_storage_suite_passes_over_a_backend() {
    runtime().block_on(async {
        Suite::test_all(BackendBuilder)
            .await
            .expect("openraft's storage suite over a backend");
    });
}

// Proves a leader's proposal whose stamped base offset is stale (another
// proposal took those offsets first) gets the next offsets where it joins
// the log, and its writer is answered with them, over a backend and over
// the shared log (whose group stopped on it: the cluster simulation's seed
// 1): offsets are assigned by the log, never trusted from the proposal.
#[test]
fn a_stale_proposal_takes_the_next_offsets() {
    for shared in [false, true] {
        runtime().block_on(async {
            let io = SimIo::new(5);
            let clock: Rc<dyn Clock> = Rc::new(SimClock::new(1_700_000_000_000_000));
            let (log, _) = RaftLog::open(
                io,
                Path::new("/data/p"),
                config(),
                clock,
                BufferPool::new(1 << 20),
            )
            .await
            .expect("open");
            let applied = Rc::new(Applied::default());
            let raft_config = Arc::new(
                Config {
                    heartbeat_interval: 50,
                    election_timeout_min: 150,
                    election_timeout_max: 300,
                    ..Default::default()
                }
                .validate()
                .expect("a valid config"),
            );
            let machine = StateMachine::new(applied.clone());
            let raft = if shared {
                Raft::new(1, raft_config, Alone, LogStore::new(log), machine).await
            } else {
                let backend = SharedBackend {
                    log: Rc::new(futures_util::lock::Mutex::new(log)),
                };
                let store = crate::backend::BackendLogStore::new(backend);
                Raft::new(1, raft_config, Alone, store, machine).await
            }
            .expect("start");
            let members = std::collections::BTreeMap::from([(
                1u64,
                openraft::impls::BasicNode {
                    addr: "127.0.0.1:8091".to_string(),
                },
            )]);
            raft.initialize(members).await.expect("initialize");
            let first = raft.client_write(proposal(0, 4)).await.expect("write");
            assert_eq!(first.response().base_offset, 0);
            // Stamped for 0 again: it lands at 4.
            let second = raft.client_write(proposal(0, 2)).await.expect("write");
            assert_eq!(
                second.response(),
                &Appended {
                    base_offset: 4,
                    last_offset: 5
                },
                "shared log: {shared}"
            );
            assert_eq!(applied.committed_next_offset.get(), 6);
            raft.shutdown().await.expect("shutdown");
        });
    }
}

/// An in-process transport: a call is encoded, handed to the target
/// group's `serve`, and its answer decoded, as between real nodes; a node
/// taken out answers nothing.
#[derive(Clone, Default)]
struct InProcess {
    /// The member this copy calls from.
    from: u64,
    nodes: Rc<std::cell::RefCell<std::collections::BTreeMap<u64, Rc<BackendRaft>>>>,
    /// Members cut off: they neither reach nor are reached.
    down: Rc<std::cell::RefCell<std::collections::BTreeSet<u64>>>,
    /// Each member's applied state (forwarded proposals resolve resends).
    applied: Rc<std::cell::RefCell<std::collections::BTreeMap<u64, Rc<Applied>>>>,
    /// The member whose calls are served but whose answers are lost.
    lose_answers_of: Rc<std::cell::Cell<Option<u64>>>,
    /// Pipelined appends (`crate::pipeline`) are held this long before
    /// they are served, the odd calls of a stream less than the even ones
    /// so that each overtakes the one before it; zero: served at once.
    stream_delay: Rc<std::cell::Cell<std::time::Duration>>,
    /// Per (caller, target): pipelined appends out now, the most out at
    /// once, and how many were served before a call made before them.
    streams: Rc<std::cell::RefCell<std::collections::BTreeMap<(u64, u64), StreamCalls>>>,
}

#[derive(Debug, Default, Clone, Copy)]
struct StreamCalls {
    out: u32,
    most_out: u32,
    overtaken: u32,
    last_seq: Option<(u64, u64)>,
}

type BackendRaft = openraft::Raft<PartitionRaft, StateMachine>;

impl crate::network::Transport for InProcess {
    async fn call(
        &self,
        target: u64,
        _channel: u64,
        body: Vec<u8>,
        _timeout: std::time::Duration,
    ) -> Result<Vec<u8>, crate::network::TransportError> {
        let cut_off = {
            let down = self.down.borrow();
            down.contains(&self.from) || down.contains(&target)
        };
        if cut_off {
            return Err(crate::network::TransportError::Unreachable(format!(
                "node {} or {target} is cut off",
                self.from
            )));
        }
        let place = body
            .split_first()
            .filter(|(kind, _)| **kind == crate::network::APPEND_STREAM)
            .and_then(|(_, rest)| crate::pipeline::split_header(rest))
            .map(|(stream, seq, _)| (stream, seq));
        if let Some((stream, seq)) = place {
            let key = (self.from, target);
            {
                let mut streams = self.streams.borrow_mut();
                let calls = streams.entry(key).or_default();
                calls.out += 1;
                calls.most_out = calls.most_out.max(calls.out);
            }
            let delay = self.stream_delay.get();
            if !delay.is_zero() {
                monoio::time::sleep(if seq % 2 == 0 { delay } else { delay / 4 }).await;
            }
            let mut streams = self.streams.borrow_mut();
            let calls = streams.entry(key).or_default();
            if calls
                .last_seq
                .is_some_and(|(last_stream, last)| last_stream == stream && last > seq)
            {
                calls.overtaken += 1;
            }
            calls.last_seq = Some((stream, seq));
        }
        let raft = self.nodes.borrow().get(&target).cloned();
        let applied = self.applied.borrow().get(&target).cloned();
        let answer = match raft {
            Some(raft) => {
                let answer = crate::network::serve(
                    &raft,
                    applied.as_deref().map(|a| &a.replays),
                    body.into(),
                )
                .await;
                if self.lose_answers_of.get() == Some(self.from) {
                    return Err(crate::network::TransportError::Failed(
                        "the answer was lost".to_string(),
                    ));
                }
                Ok(answer)
            }
            None => Err(crate::network::TransportError::Unreachable(format!(
                "node {target} is down"
            ))),
        };
        if place.is_some()
            && let Some(calls) = self.streams.borrow_mut().get_mut(&(self.from, target))
        {
            calls.out -= 1;
        }
        answer
    }
}

async fn start_member(
    id: u64,
    transport: &InProcess,
) -> (Rc<BackendRaft>, SharedBackend, Rc<Applied>) {
    let io = SimIo::new(100 + id);
    let clock: Rc<dyn Clock> = Rc::new(SimClock::new(1_700_000_000_000_000));
    let (log, _) = RaftLog::open(
        io,
        Path::new("/data/p"),
        config(),
        clock,
        BufferPool::new(1 << 20),
    )
    .await
    .expect("open");
    let backend = SharedBackend {
        log: Rc::new(futures_util::lock::Mutex::new(log)),
    };
    let applied = Rc::new(Applied::default());
    let raft_config = Arc::new(
        Config {
            heartbeat_interval: 30,
            election_timeout_min: 150,
            election_timeout_max: 300,
            enable_pre_vote: Some(true),
            ..Default::default()
        }
        .validate()
        .expect("a valid config"),
    );
    let raft = Rc::new(
        BackendRaft::new(
            id,
            raft_config,
            crate::network::Network::new(
                InProcess {
                    from: id,
                    ..transport.clone()
                },
                7,
            ),
            crate::backend::BackendLogStore::new(backend.clone()),
            StateMachine::new(applied.clone()),
        )
        .await
        .expect("start"),
    );
    transport.nodes.borrow_mut().insert(id, raft.clone());
    transport.applied.borrow_mut().insert(id, applied.clone());
    (raft, backend, applied)
}

async fn leader_of(rafts: &[Rc<BackendRaft>]) -> Rc<BackendRaft> {
    for _ in 0..200 {
        for raft in rafts {
            if raft.is_leader() {
                return raft.clone();
            }
        }
        monoio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("no leader within 4 s");
}

/// Writes `proposal` through whichever member leads, retrying while
/// leadership settles (a new leader refuses writes until its lease is
/// established); the offsets it was given.
async fn write_to_leader(rafts: &[Rc<BackendRaft>], messages: u32) -> Appended {
    for _ in 0..250 {
        let leader = leader_of(rafts).await;
        match leader.client_write(proposal(0, messages)).await {
            Ok(written) => return *written.response(),
            Err(openraft::errors::RaftError::APIError(
                openraft::errors::ClientWriteError::ForwardToLeader(_),
            )) => monoio::time::sleep(std::time::Duration::from_millis(20)).await,
            Err(error) => panic!("write: {error}"),
        }
    }
    panic!("no write accepted within 5 s");
}

/// Asserts every member's log holds `next` messages from offset 0, the
/// same bytes on every replica.
async fn assert_replicas_alike(
    members: &[(Rc<BackendRaft>, SharedBackend, Rc<Applied>)],
    next: u64,
) {
    let mut contents = Vec::new();
    for (_, backend, _) in members {
        let mut log = backend.log.lock().await;
        log.write_pending().await.expect("write");
        let read = log
            .partition()
            .read_by_offset(0, 1000, u64::MAX)
            .await
            .expect("read");
        assert_eq!(read.message_count as u64, next);
        contents.push(read.records_bytes().into_owned());
    }
    assert!(
        contents.windows(2).all(|pair| pair[0] == pair[1]),
        "every replica stores the same bytes"
    );
}

// Proves three groups replicate through the RPC codec (every call and
// answer encoded and decoded): writes on the leader are answered with
// dense offsets, every replica stores the same messages, and after the
// leader is taken out the other two elect a new one that continues the
// offsets, which the old leader, back again, catches up on.
#[test]
fn three_members_replicate_through_the_codec_and_survive_losing_the_leader() {
    runtime().block_on(async {
        let transport = InProcess::default();
        let members = replay::three_members(&transport).await;
        let rafts: Vec<Rc<BackendRaft>> = members.iter().map(|(raft, _, _)| raft.clone()).collect();
        let mut next = 0u64;
        for messages in [2u32, 7, 1] {
            let written = write_to_leader(&rafts, messages).await;
            assert_eq!(written.base_offset, next);
            next += u64::from(messages);
        }
        let leader = leader_of(&rafts).await;
        // Take the leader out; the others go on.
        let old = *leader.node_id();
        transport.down.borrow_mut().insert(old);
        let survivors: Vec<Rc<BackendRaft>> = rafts
            .iter()
            .filter(|raft| *raft.node_id() != old)
            .cloned()
            .collect();
        let written = write_to_leader(&survivors, 3).await;
        assert_eq!(written.base_offset, next);
        next += 3;
        // The old leader comes back and catches up.
        transport.down.borrow_mut().remove(&old);
        for (_, _, applied) in &members {
            for _ in 0..200 {
                if applied.committed_next_offset.get() == next {
                    break;
                }
                monoio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            assert_eq!(applied.committed_next_offset.get(), next);
        }
        assert_replicas_alike(&members, next).await;
        for raft in &rafts {
            raft.shutdown().await.expect("shutdown");
        }
    });
}

/// A backend that records what reaches it and keeps each append's flush
/// until the test reports it (a commit phase the test drives).
#[derive(Clone, Default)]
struct Recording {
    operations: Rc<std::cell::RefCell<Vec<&'static str>>>,
    flushes: Rc<std::cell::RefCell<Vec<crate::backend::FlushedCallback>>>,
}

impl crate::backend::LogBackend for Recording {
    async fn state(&self) -> Result<crate::backend::BackendState, String> {
        Ok(crate::backend::BackendState::default())
    }

    async fn append(
        &self,
        _entries: Vec<iggyd_storage::raft::StoredEntry>,
        flushed: crate::backend::FlushedCallback,
    ) -> Result<(), String> {
        self.operations.borrow_mut().push("append");
        self.flushes.borrow_mut().push(flushed);
        Ok(())
    }

    async fn truncate_after(&self, _keep: Option<u64>) -> Result<(), String> {
        self.operations.borrow_mut().push("truncate");
        Ok(())
    }

    async fn purge_through(
        &self,
        _through: iggyd_storage::raft::LogPosition,
    ) -> Result<(), String> {
        self.operations.borrow_mut().push("purge");
        Ok(())
    }

    async fn save_vote(&self, _vote: Vec<u8>) -> Result<(), String> {
        self.operations.borrow_mut().push("vote");
        Ok(())
    }

    async fn save_committed(
        &self,
        _committed: Option<iggyd_storage::raft::LogPosition>,
    ) -> Result<(), String> {
        Ok(())
    }

    async fn read(
        &self,
        _first: u64,
        _end: u64,
        _bytes_max: u64,
    ) -> Result<Vec<iggyd_storage::raft::StoredEntry>, String> {
        Ok(Vec::new())
    }
}

// Proves the log store over a backend completes openraft's writes in
// order: a vote, a truncation or a purge reaches the backend only once
// every append before it is flushed (or its callback dropped), though the
// backend flushes appends later. A vote saved first let openraft count the
// unflushed appends durable: a follower told its leader they matched, then
// lost them in a crash (openraft stopped on the reverted log: found by the
// cluster simulation once it slowed commit phases, seed 55).
#[test]
fn a_vote_truncation_or_purge_waits_for_the_appends_before_it() {
    use openraft::storage::{IOFlushed, RaftLogStorage};
    runtime().block_on(async {
        let backend = Recording::default();
        let mut store = crate::backend::BackendLogStore::<_, PartitionRaft>::new(backend.clone());
        let entry = |index: u64| {
            <crate::Entry as openraft::entry::RaftEntry>::new(
                crate::LogId::new_term_index(1, index),
                openraft::EntryPayload::Blank,
            )
        };
        let settle = || async {
            for _ in 0..10 {
                monoio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        };
        type Write = fn(
            crate::backend::BackendLogStore<Recording>,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;
        let writes: [(&str, Write); 3] = [
            ("vote", |mut store| {
                Box::pin(async move {
                    store
                        .save_vote(&crate::Vote::new_committed(2, 1))
                        .await
                        .expect("vote")
                }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>
            }),
            ("truncate", |mut store| {
                Box::pin(async move {
                    store
                        .truncate_after(Some(crate::LogId::new_term_index(1, 1)))
                        .await
                        .expect("truncate")
                })
            }),
            ("purge", |mut store| {
                Box::pin(async move {
                    store
                        .purge(crate::LogId::new_term_index(1, 1))
                        .await
                        .expect("purge")
                })
            }),
        ];
        for (index, (name, write)) in writes.into_iter().enumerate() {
            backend.operations.borrow_mut().clear();
            store
                .append([entry(2 * index as u64 + 1)], IOFlushed::noop())
                .await
                .expect("append");
            store
                .append([entry(2 * index as u64 + 2)], IOFlushed::noop())
                .await
                .expect("append");
            let done = Rc::new(std::cell::Cell::new(false));
            let finished = done.clone();
            let waiting = write(store.clone());
            monoio::spawn(async move {
                waiting.await;
                finished.set(true);
            });
            settle().await;
            assert!(!done.get(), "{name} waits for the appends' flush");
            let first = backend.flushes.borrow_mut().remove(0);
            first(Ok(()));
            settle().await;
            assert!(!done.get(), "{name} waits for the second append's flush");
            // A backend that drops a callback has given up on it too.
            drop(backend.flushes.borrow_mut().remove(0));
            settle().await;
            assert!(done.get(), "{name} goes on once both are flushed");
            assert_eq!(
                *backend.operations.borrow(),
                ["append", "append", name],
                "the order the backend saw"
            );
        }
    });
}

mod pipeline;
mod replay;

// Proves a proposal's bytes, now encoded as one byte string, are the same
// bytes in postcard as the sequence of `u8` values they were encoded as
// before: nodes of either build read each other's entries. Lengths past
// one varint byte (128 and more) are included.
#[test]
fn a_proposal_encodes_as_it_did_when_its_bytes_were_a_sequence() {
    #[derive(serde::Serialize)]
    enum Before {
        Batch(Vec<u8>),
        Offsets(Vec<u8>),
    }
    for length in [0_usize, 1, 127, 128, 300, 70_000] {
        let bytes: Vec<u8> = (0..length).map(|at| (at % 251) as u8).collect();
        let pairs = [
            (
                Proposal::Batch(bytes.clone().into()),
                Before::Batch(bytes.clone()),
            ),
            (
                Proposal::Offsets(bytes.clone()),
                Before::Offsets(bytes.clone()),
            ),
        ];
        for (now, before) in pairs {
            let encoded = postcard::to_allocvec(&now).expect("encodes");
            assert_eq!(
                encoded,
                postcard::to_allocvec(&before).expect("encodes"),
                "{length} bytes"
            );
            let decoded: Proposal = postcard::from_bytes(&encoded).expect("decodes");
            assert!(decoded == now, "{length} bytes round trip");
        }
    }
}
