//! Pipelined replication: a leader keeps up to [`DEPTH`] AppendEntries
//! calls out to a follower at once, and the follower hands them to
//! openraft in the order the leader made them.
//!
//! openraft replicates to a follower as a stream of AppendEntries requests
//! and wants their answers back in the same order (`stream_append`). Sent
//! one at a time, each batch waited for the previous batch's whole round
//! (the leader's encoding, TLS, the follower's decoding, its direct write,
//! the answer) before it left, so with several producers a batch spent
//! most of its latency queued behind another.
//!
//! - **Leader side** ([`stream`]): every request of one stream is a call
//!   of its own, `[kind][stream id u64][sequence u64][postcard request]`,
//!   with up to [`DEPTH`] out; answers are yielded in the order the calls
//!   were made, and the first failure or refusal ends the stream (openraft
//!   starts a new one from what the follower acknowledged).
//! - **Follower side** ([`receive`]): a call waits for its turn, the one
//!   after the last handed over of the same stream (calls overtake each
//!   other: the daemon spawns a task per call, the simulated network
//!   delays each by its own time), then goes to openraft's own pipelined
//!   `Raft::stream_append` through a channel, and its answer is that
//!   stream's result for it. Handed over in order, a follower never sees a
//!   batch before the one it follows, which openraft takes for a log
//!   conflict. A call whose predecessors do not come within [`TURN_WAIT`]
//!   is refused, as is a duplicate or a call of an older stream.
//!
//! A stream's state on the follower lives in the group's `Raft` (openraft's
//! extensions), one per leader node, and its feed into openraft closes
//! after [`IDLE`] without a call (it holds the group; a later call of the
//! same stream opens a new feed where the old one ended).
//!
//! Must not: hand a call to openraft out of its stream's order, or answer
//! a call with another call's result.

use crate::PartitionTypes;
use crate::network::{
    APPEND_STREAM, Raft, Transport, TransportError, answer_ok, answer_refused, decode_answer,
    encode_with, rpc_error,
};
use futures_util::stream::{FuturesOrdered, StreamExt};
use openraft::alias::{MpscSenderOf, OneshotSenderOf};
use openraft::errors::RPCError;
use openraft::network::RPCOption;
use openraft::raft::{AppendEntriesRequest, StreamAppendResult};
use openraft::rt::{MpscSender, OneshotSender};
use openraft::type_config::TypeConfigExt;
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

/// Calls a leader keeps out to one follower per group.
pub const DEPTH: usize = 4;

/// The longest a call waits on the follower for the calls before it.
pub const TURN_WAIT: Duration = Duration::from_secs(1);

/// A follower closes a stream's feed into openraft after this long
/// without a call.
pub const IDLE: Duration = Duration::from_secs(5);

/// Requests a feed holds for openraft before its sender waits.
const FEED_SLOTS: usize = 2 * DEPTH;

/// Why a call of a stream whose feed ended is refused.
const ENDED: &str = "the follower's stream has ended";

/// The bytes after a pipelined call's kind that place it in its stream.
pub const HEADER_BYTES: usize = 16;

thread_local! {
    /// The next stream id made on this thread: increasing, and started
    /// from the clock, so a restarted leader's streams come after its
    /// previous life's.
    static NEXT_STREAM: Cell<u64> = Cell::new(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |since| u64::try_from(since.as_nanos()).unwrap_or(u64::MAX / 2)),
    );
}

fn next_stream_id() -> u64 {
    NEXT_STREAM.with(|next| {
        let id = next.get();
        next.set(id.wrapping_add(1));
        id
    })
}

/// The header of call `seq` of stream `stream`.
pub fn header(stream: u64, seq: u64) -> [u8; HEADER_BYTES] {
    let mut out = [0; HEADER_BYTES];
    out[..8].copy_from_slice(&stream.to_le_bytes());
    out[8..].copy_from_slice(&seq.to_le_bytes());
    out
}

/// The stream id and sequence of a pipelined call, and its request's bytes.
pub fn split_header(body: &[u8]) -> Option<(u64, u64, &[u8])> {
    let (header, rest) = body.split_first_chunk::<HEADER_BYTES>()?;
    let (stream, seq) = header.split_at(8);
    Some((
        u64::from_le_bytes(stream.try_into().ok()?),
        u64::from_le_bytes(seq.try_into().ok()?),
        rest,
    ))
}

type Answer<C> = Result<StreamAppendResult<C>, RPCError<C>>;
type InFlight<C> = Pin<Box<dyn Future<Output = Answer<C>>>>;

/// The leader's side: sends `input`'s requests to `target` as calls of one
/// new stream, up to [`DEPTH`] at once, and yields their answers in order.
pub fn stream<'s, T, C, S>(
    transport: T,
    target: u64,
    channel: u64,
    input: S,
    option: RPCOption,
) -> openraft::base::BoxStream<'s, Answer<C>>
where
    T: Transport,
    C: PartitionTypes,
    S: futures_util::Stream<Item = AppendEntriesRequest<C>> + Unpin + 'static,
{
    struct State<C: PartitionTypes, S> {
        input: Option<S>,
        in_flight: FuturesOrdered<InFlight<C>>,
        next_seq: u64,
        ended: bool,
    }
    let stream_id = next_stream_id();
    let ttl = option.hard_ttl();
    let send = move |state: &mut State<C, S>, request: AppendEntriesRequest<C>| {
        let body = encode_with(APPEND_STREAM, &header(stream_id, state.next_seq), &request);
        state.next_seq += 1;
        drop(request);
        let transport = transport.clone();
        // A call waits on the follower behind those out before it: its
        // time-out counts theirs too.
        let ttl = ttl.saturating_mul(u32::try_from(state.in_flight.len() + 1).unwrap_or(1));
        state.in_flight.push_back(Box::pin(async move {
            let body =
                body.map_err(|reason| network_error(format!("cannot encode the call: {reason}")))?;
            let bytes = transport
                .call(target, channel, body, ttl)
                .await
                .map_err(rpc_error)?;
            decode_answer(&bytes).map_err(network_error)
        }));
    };
    let state = State {
        input: Some(input),
        in_flight: FuturesOrdered::new(),
        next_seq: 0,
        ended: false,
    };
    Box::pin(futures_util::stream::unfold(state, move |mut state| {
        let send = send.clone();
        async move {
            if state.ended {
                return None;
            }
            let answer = loop {
                let room = state.in_flight.len() < DEPTH;
                let next = match (&mut state.input, room) {
                    (Some(input), true) if state.in_flight.is_empty() => {
                        Next::Request(input.next().await)
                    }
                    (Some(input), true) => {
                        let request = input.next();
                        let answer = state.in_flight.next();
                        match futures_util::future::select(request, answer).await {
                            futures_util::future::Either::Left((request, _)) => {
                                Next::Request(request)
                            }
                            futures_util::future::Either::Right((answer, _)) => {
                                Next::Answer(answer)
                            }
                        }
                    }
                    _ => Next::Answer(state.in_flight.next().await),
                };
                match next {
                    Next::Request(Some(request)) => send(&mut state, request),
                    Next::Request(None) => state.input = None,
                    Next::Answer(Some(answer)) => break answer,
                    // Nothing out and nothing more to send.
                    Next::Answer(None) => return None,
                }
            };
            // A failure or a refusal ends the stream: what was sent after
            // it is not reported (openraft resends from what was
            // acknowledged).
            if !matches!(answer, Ok(Ok(_))) {
                state.ended = true;
                state.input = None;
                state.in_flight = FuturesOrdered::new();
            }
            Some((answer, state))
        }
    }))
}

enum Next<R, A> {
    Request(Option<R>),
    Answer(Option<A>),
}

fn network_error<C: PartitionTypes>(reason: String) -> RPCError<C> {
    rpc_error(TransportError::Failed(reason))
}

/// A follower group's pipelined streams. openraft runs several to one
/// follower at once (its replication, and each heartbeat a stream of one
/// call), so they are told apart by leader and id, and at most
/// [`MAX_STREAMS`] are kept.
pub struct Pipes<C: PartitionTypes>(Rc<RefCell<PipesState<C>>>);

/// Streams a follower group keeps; past this, the least recently used one
/// with nothing out goes (a later call of it waits for a beginning that
/// never comes, and is refused: its leader starts a new stream).
pub const MAX_STREAMS: usize = 16;

impl<C: PartitionTypes> Clone for Pipes<C> {
    fn clone(&self) -> Self {
        Pipes(self.0.clone())
    }
}

impl<C: PartitionTypes> Default for Pipes<C> {
    fn default() -> Self {
        Pipes(Rc::new(RefCell::new(PipesState {
            streams: BTreeMap::new(),
            waiters: Vec::new(),
            ticks: 0,
        })))
    }
}

struct PipesState<C: PartitionTypes> {
    /// By leader node and stream id.
    streams: BTreeMap<(u64, u64), Pipe<C>>,
    /// Calls waiting for their turn, woken at every change.
    waiters: Vec<Waker>,
    /// Counts calls handed over: when each stream was last used, and the
    /// feeds' ids.
    ticks: u64,
}

/// One stream on this follower.
struct Pipe<C: PartitionTypes> {
    /// The sequence of the next call to hand over.
    next_seq: u64,
    /// openraft refused a call of this stream (a conflict, a higher vote)
    /// or stopped: its later calls are refused too.
    failed: bool,
    last_used: u64,
    feed: Option<Feed<C>>,
}

/// A stream's way into openraft: the requests' channel, and where each
/// answer goes, in order.
struct Feed<C: PartitionTypes> {
    id: u64,
    input: MpscSenderOf<C, AppendEntriesRequest<C>>,
    replies: Replies<C>,
}

/// Where each answer of a feed goes, in the order of its calls.
type Replies<C> = Rc<RefCell<VecDeque<OneshotSenderOf<C, Vec<u8>>>>>;

/// Where a call stands against its stream.
enum Turn {
    Now,
    Wait,
    Refused(&'static str),
}

impl<C: PartitionTypes> PipesState<C> {
    fn turn(&self, key: (u64, u64), seq: u64) -> Turn {
        let Some(pipe) = self.streams.get(&key) else {
            return if seq == 0 { Turn::Now } else { Turn::Wait };
        };
        if pipe.failed {
            return Turn::Refused("an earlier call of this stream was refused");
        }
        match seq.cmp(&pipe.next_seq) {
            std::cmp::Ordering::Equal => Turn::Now,
            std::cmp::Ordering::Greater => Turn::Wait,
            std::cmp::Ordering::Less => Turn::Refused("a duplicate call"),
        }
    }

    /// Makes room for one more stream: drops the least recently used one,
    /// preferring one with no call out.
    fn make_room(&mut self) {
        if self.streams.len() < MAX_STREAMS {
            return;
        }
        let idle = |pipe: &Pipe<C>| {
            pipe.feed
                .as_ref()
                .is_none_or(|feed| feed.replies.borrow().is_empty())
        };
        let victim = self
            .streams
            .iter()
            .min_by_key(|(_, pipe)| (!idle(pipe), pipe.last_used))
            .map(|(key, _)| *key);
        if let Some(key) = victim {
            self.streams.remove(&key);
        }
    }

    fn wake_all(&mut self) {
        for waker in self.waiters.drain(..) {
            waker.wake();
        }
    }
}

/// The follower's side: hands `request`, call `seq` of stream `stream`, to
/// `raft` in its stream's order and answers with openraft's result for it
/// (`[0]` then the postcard `StreamAppendResult`), or refuses it.
pub async fn receive<SM, C>(
    raft: &Raft<SM, C>,
    stream: u64,
    seq: u64,
    request: AppendEntriesRequest<C>,
) -> Vec<u8>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C, SnapshotData = std::io::Cursor<Vec<u8>>>,
{
    let pipes = raft.extensions().get::<Pipes<C>>();
    let key = (request.vote.leader_id().voted_for, stream);
    let waited = C::timeout(
        TURN_WAIT,
        std::future::poll_fn(|cx| {
            let mut state = pipes.0.borrow_mut();
            match state.turn(key, seq) {
                Turn::Now => Poll::Ready(Ok(())),
                Turn::Refused(reason) => Poll::Ready(Err(reason)),
                Turn::Wait => {
                    state.waiters.push(cx.waker().clone());
                    Poll::Pending
                }
            }
        }),
    )
    .await;
    match waited {
        Ok(Ok(())) => {}
        Ok(Err(reason)) => return answer_refused(reason),
        Err(_) => return answer_refused("the calls before it in its stream did not come"),
    }
    // This call's turn: nothing else of the stream is handed over until it
    // is in openraft's channel.
    let (reply, answer) = C::oneshot();
    let input = {
        let mut state = pipes.0.borrow_mut();
        state.ticks += 1;
        let tick = state.ticks;
        if !state.streams.contains_key(&key) {
            state.make_room();
        }
        let pipe = state.streams.entry(key).or_insert_with(|| Pipe {
            next_seq: 0,
            failed: false,
            last_used: tick,
            feed: None,
        });
        pipe.last_used = tick;
        let feed = pipe
            .feed
            .get_or_insert_with(|| open_feed(raft, pipes.clone(), key, tick));
        feed.replies.borrow_mut().push_back(reply);
        feed.input.clone()
    };
    let handed = MpscSender::send(&input, request).await.is_ok();
    drop(input);
    {
        let mut state = pipes.0.borrow_mut();
        if let Some(pipe) = state.streams.get_mut(&key) {
            pipe.next_seq = seq + 1;
            if !handed {
                pipe.failed = true;
            }
        }
        state.wake_all();
    }
    if !handed {
        return answer_refused(ENDED);
    }
    answer.await.unwrap_or_else(|_| answer_refused(ENDED))
}

/// Opens a feed into `raft.stream_append` for stream `key`; a task sends
/// each result to the call it answers, and closes the feed once it has
/// been idle for [`IDLE`] or openraft ends the stream.
fn open_feed<SM, C>(raft: &Raft<SM, C>, pipes: Pipes<C>, key: (u64, u64), id: u64) -> Feed<C>
where
    C: PartitionTypes,
    SM: openraft::storage::RaftStateMachine<C, SnapshotData = std::io::Cursor<Vec<u8>>>,
{
    let (input, requests) = C::mpsc::<AppendEntriesRequest<C>>(FEED_SLOTS);
    let replies: Replies<C> = Rc::default();
    let output = raft.stream_append(C::mpsc_to_stream(requests));
    let answers = replies.clone();
    // Detached: the task ends with the feed.
    let _task = C::spawn(async move {
        let mut output = std::pin::pin!(output);
        let mut failed = false;
        loop {
            let item = match C::timeout(IDLE, output.next()).await {
                Ok(Some(item)) => item,
                Ok(None) => break,
                Err(_) => {
                    // Idle: close the feed if nothing is out (a call after
                    // this opens a new one); openraft's stream then ends.
                    if answers.borrow().is_empty() {
                        close_feed(&pipes, key, id, false);
                    }
                    continue;
                }
            };
            let answer = match &item {
                Ok(result) => {
                    failed = result.is_err();
                    answer_ok(result)
                }
                Err(fatal) => {
                    failed = true;
                    answer_refused(&fatal.to_string())
                }
            };
            let Some(reply) = answers.borrow_mut().pop_front() else {
                break;
            };
            let _ = reply.send(answer);
            if failed {
                break;
            }
        }
        close_feed(&pipes, key, id, failed);
        let left: Vec<_> = answers.borrow_mut().drain(..).collect();
        for reply in left {
            let _ = reply.send(answer_refused(ENDED));
        }
    });
    Feed { id, input, replies }
}

/// Takes feed `id` out of stream `key` if it is still there, marking the
/// stream failed when openraft refused one of its calls; wakes the calls
/// waiting for their turn (a refused stream refuses them).
fn close_feed<C: PartitionTypes>(pipes: &Pipes<C>, key: (u64, u64), id: u64, failed: bool) {
    let mut state = pipes.0.borrow_mut();
    if let Some(pipe) = state.streams.get_mut(&key)
        && pipe.feed.as_ref().is_some_and(|feed| feed.id == id)
    {
        pipe.feed = None;
        pipe.failed |= failed;
    }
    state.wake_all();
}
