//! The calling side: a [`PeerClient`] is this shard's one connection to
//! one other node, used from this shard's thread only (`Rc`, `!Send`).
//! It connects on the first call, multiplexes every call on that
//! connection (a writer task fed by a bounded queue, a reader task that
//! hands each answer to its caller by call id), and after the connection
//! ends connects again on the next call.
//!
//! Failure semantics, which Raft relies on: a request is never sent twice.
//! When a connection ends, every call queued or waiting on it fails at
//! once with `PeerError::Disconnected` (it may or may not have run; the
//! caller decides whether to call again). A call that times out stops
//! waiting, and its answer, should it come, is discarded; a timed-out call
//! still in the queue is not sent at all. When a connection cannot be made,
//! the client waits `reconnect_backoff_min`, doubling per further failure
//! up to `reconnect_backoff_max`, before the next attempt, and calls
//! during that wait fail at once with `PeerError::Unreachable`: no call
//! ever waits on a node known to be down, and nothing retries in a loop.
//!
//! Must not: resend a request, wait without a bound (each call has its
//! timeout, each connection its limits), or keep calls in flight past
//! `calls_in_flight_max` (further calls wait for room within their
//! timeout).

use crate::budget::Budget;
use crate::counters::{OpenConnection, PeerCounters};
use crate::error::{PeerError, PeerFailure};
use crate::frame::{Frame, FrameKind, decode_failure};
use crate::handshake::{self, Established};
use crate::limits::ValidLimits;
use crate::link::{LinkEnd, LinkReader, Outbound, run_writer};
use crate::tls::PeerTls;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The node a client calls, and where it listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerTarget {
    pub node_id: u64,
    pub address: SocketAddr,
}

/// One shard's connection to one node. Clones share it.
#[derive(Debug, Clone)]
pub struct PeerClient {
    inner: Rc<Inner>,
}

#[derive(Debug)]
struct Inner {
    tls: PeerTls,
    shard: u16,
    target: PeerTarget,
    limits: ValidLimits,
    counters: Arc<PeerCounters>,
    budget: Budget,
    next_call_id: Cell<u64>,
    next_attempt: Cell<u64>,
    state: RefCell<State>,
}

#[derive(Debug)]
enum State {
    /// No connection. After a failed attempt, none before `retry_at`.
    Down {
        failures: u32,
        retry_at: Option<Instant>,
        reason: String,
    },
    /// Attempt `attempt` runs; its sender of `done` is dropped when it is
    /// done.
    Connecting {
        attempt: u64,
        done: flume::Receiver<()>,
    },
    Up(Rc<Connection>),
}

/// An answer for a waiting call.
#[derive(Debug)]
enum Answer {
    Reply(Vec<u8>),
    Failure(PeerFailure),
}

#[derive(Debug)]
struct Waiting {
    channel: u64,
    answer: flume::Sender<Answer>,
}

/// One established connection, as its calls and tasks see it.
#[derive(Debug)]
struct Connection {
    queue: flume::Sender<Outbound>,
    /// Calls sent or queued and not yet answered, by call id. Dropping an
    /// entry's sender fails its call with `Disconnected`.
    waiting: RefCell<HashMap<u64, Waiting>>,
    /// Dropped to end the reader and writer tasks.
    abort: RefCell<Option<flume::Sender<()>>>,
    /// Why the connection ended, once it has.
    ended: RefCell<Option<String>>,
}

impl Connection {
    /// Ends the connection: its tasks stop, and every call on it fails at
    /// once. Only the first reason counts.
    fn end(&self, reason: String) {
        if self.ended.borrow().is_some() {
            return;
        }
        *self.ended.borrow_mut() = Some(reason);
        let abort = self.abort.borrow_mut().take();
        drop(abort);
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        drop(waiting);
    }

    fn end_reason(&self) -> String {
        self.ended
            .borrow()
            .clone()
            .unwrap_or_else(|| "the connection ended".to_string())
    }
}

/// Removes a call from its connection's waiting calls when the call ends
/// (answered, failed, timed out or dropped).
struct Registered {
    connection: Rc<Connection>,
    call_id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connection.waiting.borrow_mut().remove(&self.call_id);
    }
}

impl PeerClient {
    /// A client calling `target` from shard `shard` of the node `tls`
    /// names. It connects on its first call.
    pub fn new(
        tls: PeerTls,
        shard: u16,
        target: PeerTarget,
        limits: ValidLimits,
        counters: Arc<PeerCounters>,
    ) -> PeerClient {
        PeerClient {
            inner: Rc::new(Inner {
                tls,
                shard,
                target,
                limits,
                counters,
                budget: Budget::new(limits.calls_in_flight_max, limits.call_bytes_in_flight_max),
                next_call_id: Cell::new(1),
                next_attempt: Cell::new(1),
                state: RefCell::new(State::Down {
                    failures: 0,
                    retry_at: None,
                    reason: "not connected yet".to_string(),
                }),
            }),
        }
    }

    pub fn target(&self) -> PeerTarget {
        self.inner.target
    }

    /// Whether a connection is established now.
    pub fn is_connected(&self) -> bool {
        matches!(*self.inner.state.borrow(), State::Up(_))
    }

    /// Ends the current connection, if any: its calls fail with
    /// `Disconnected`; the next call connects again.
    pub fn disconnect(&self) {
        let state = std::mem::replace(
            &mut *self.inner.state.borrow_mut(),
            State::Down {
                failures: 0,
                retry_at: None,
                reason: "disconnected by this node".to_string(),
            },
        );
        match state {
            State::Up(connection) => connection.end("disconnected by this node".to_string()),
            // An attempt in flight finds the state changed and drops what
            // it made.
            State::Connecting { .. } | State::Down { .. } => {}
        }
    }

    /// Calls `channel` on the target node with `body`; its handler's reply,
    /// or why there is none, within `timeout`.
    pub async fn call(
        &self,
        channel: u64,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<Vec<u8>, PeerError> {
        let inner = &self.inner;
        let body_bytes_max = inner.limits.body_bytes_max();
        if body.len() > body_bytes_max {
            return Err(PeerError::TooLarge {
                bytes: body.len(),
                max: body_bytes_max,
            });
        }
        let result = match monoio::time::timeout(timeout, self.call_within(channel, body)).await {
            Ok(result) => result,
            Err(_) => Err(PeerError::TimedOut {
                node: inner.target.node_id,
                timeout,
            }),
        };
        match &result {
            Ok(_) | Err(PeerError::TooLarge { .. }) => {}
            Err(PeerError::Failed { .. }) => inner.counters.call_failed(),
            Err(PeerError::TimedOut { .. }) => inner.counters.call_timed_out(),
            Err(PeerError::Disconnected { .. }) => inner.counters.call_disconnected(),
            Err(PeerError::Unreachable { .. }) => inner.counters.call_unreachable(),
        }
        result
    }

    async fn call_within(&self, channel: u64, body: Vec<u8>) -> Result<Vec<u8>, PeerError> {
        let inner = &self.inner;
        let node = inner.target.node_id;
        let _grant = inner.budget.admit(body.len()).await;
        let connection = self.connection().await?;
        let call_id = inner.next_call_id.get();
        inner.next_call_id.set(call_id + 1);
        let (answer, answered) = flume::bounded(1);
        connection
            .waiting
            .borrow_mut()
            .insert(call_id, Waiting { channel, answer });
        let _registered = Registered {
            connection: connection.clone(),
            call_id,
        };
        let request = Frame {
            kind: FrameKind::Request,
            call_id,
            channel,
            body,
        };
        let disconnected = || PeerError::Disconnected {
            node,
            reason: connection.end_reason(),
        };
        if connection
            .queue
            .send_async(Outbound::Frame(request))
            .await
            .is_err()
        {
            return Err(disconnected());
        }
        match answered.recv_async().await {
            Ok(Answer::Reply(reply)) => Ok(reply),
            Ok(Answer::Failure(failure)) => Err(PeerError::Failed { node, failure }),
            Err(_) => Err(disconnected()),
        }
    }

    /// The established connection, connecting if there is none and no
    /// back-off forbids it.
    async fn connection(&self) -> Result<Rc<Connection>, PeerError> {
        let inner = &self.inner;
        let node = inner.target.node_id;
        let attempt = {
            let mut state = inner.state.borrow_mut();
            match &*state {
                State::Up(connection) => return Ok(connection.clone()),
                State::Connecting { done, .. } => done.clone(),
                State::Down {
                    retry_at: Some(at),
                    reason,
                    ..
                } if Instant::now() < *at => {
                    return Err(PeerError::Unreachable {
                        node,
                        reason: format!(
                            "{reason}; next attempt in {:?}",
                            at.saturating_duration_since(Instant::now())
                        ),
                    });
                }
                State::Down { failures, .. } => {
                    let failures = *failures;
                    let (done_sender, done) = flume::bounded(1);
                    let attempt_id = inner.next_attempt.get();
                    inner.next_attempt.set(attempt_id + 1);
                    *state = State::Connecting {
                        attempt: attempt_id,
                        done: done.clone(),
                    };
                    inner.counters.connect_attempt();
                    monoio::spawn(attempt(
                        Rc::downgrade(inner),
                        attempt_id,
                        failures,
                        done_sender,
                    ));
                    done
                }
            }
        };
        // Ends when the attempt is done (its sender dropped).
        let _ = attempt.recv_async().await;
        match &*inner.state.borrow() {
            State::Up(connection) => Ok(connection.clone()),
            State::Down { reason, .. } => Err(PeerError::Unreachable {
                node,
                reason: reason.clone(),
            }),
            State::Connecting { .. } => Err(PeerError::Unreachable {
                node,
                reason: "the connection attempt was superseded".to_string(),
            }),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let State::Up(connection) = &*self.state.borrow() {
            connection.end("the client was dropped".to_string());
        }
    }
}

/// The wait before the attempt after `failures` failed ones.
fn backoff(limits: &ValidLimits, failures: u32) -> Duration {
    let factor = 1u32
        .checked_shl(failures.saturating_sub(1))
        .unwrap_or(u32::MAX);
    limits
        .reconnect_backoff_min
        .saturating_mul(factor)
        .min(limits.reconnect_backoff_max)
}

/// One connection attempt: sets the client's state to `Up` or `Down`.
/// The client may be dropped meanwhile; then what was made is dropped.
async fn attempt(client: Weak<Inner>, attempt_id: u64, failures: u32, _done: flume::Sender<()>) {
    let Some(inner) = client.upgrade() else {
        return;
    };
    let (tls, shard, target, limits, counters) = (
        inner.tls.clone(),
        inner.shard,
        inner.target,
        inner.limits,
        inner.counters.clone(),
    );
    drop(inner);
    let result = handshake::connect(
        target.address,
        target.node_id,
        &tls,
        shard,
        &limits,
        &counters,
    )
    .await;
    let Some(inner) = client.upgrade() else {
        return;
    };
    // A disconnect meanwhile (and any attempt after it) supersedes this one.
    if !matches!(*inner.state.borrow(), State::Connecting { attempt, .. } if attempt == attempt_id)
    {
        return;
    }
    let next = match result {
        Ok(established) => {
            counters.established();
            tracing::info!(
                node = target.node_id,
                address = %target.address,
                shard,
                peer_shard = established.peer.shard,
                "connected to peer"
            );
            State::Up(start(&client, &inner, established))
        }
        Err(refusal) => {
            counters.connect_failure();
            let failures = failures.saturating_add(1);
            let wait = backoff(&limits, failures);
            let reason = refusal.to_string();
            if failures == 1 {
                tracing::warn!(
                    node = target.node_id,
                    address = %target.address,
                    %reason,
                    retry_in = ?wait,
                    "cannot connect to peer"
                );
            } else {
                tracing::debug!(
                    node = target.node_id,
                    address = %target.address,
                    %reason,
                    failures,
                    retry_in = ?wait,
                    "cannot connect to peer"
                );
            }
            State::Down {
                failures,
                retry_at: Some(Instant::now() + wait),
                reason,
            }
        }
    };
    *inner.state.borrow_mut() = next;
}

/// Starts an established connection's writer and reader tasks.
fn start(client: &Weak<Inner>, inner: &Inner, established: Established) -> Rc<Connection> {
    let Established {
        mut reader, writer, ..
    } = established;
    let limits = inner.limits;
    let (queue, queue_receiver) = flume::bounded(limits.write_queue_frames_max);
    let (abort, aborted) = flume::bounded::<()>(1);
    reader.flush_through(queue.clone());
    let connection = Rc::new(Connection {
        queue,
        waiting: RefCell::new(HashMap::new()),
        abort: RefCell::new(Some(abort)),
        ended: RefCell::new(None),
    });
    let open = OpenConnection::new(inner.counters.clone());
    monoio::spawn({
        let connection = Rc::downgrade(&connection);
        let client = client.clone();
        let aborted = aborted.clone();
        async move {
            let wanted = |frame: &Frame| {
                frame.kind != FrameKind::Request
                    || connection
                        .upgrade()
                        .is_some_and(|open| open.waiting.borrow().contains_key(&frame.call_id))
            };
            let result = run_writer(
                writer,
                queue_receiver,
                aborted,
                Some(limits.ping_interval),
                wanted,
            )
            .await;
            let end = match result {
                Ok(()) => LinkEnd::Closed("the connection was closed"),
                Err(end) => end,
            };
            if let Some(connection) = connection.upgrade() {
                ended(&client, &connection, end);
            }
        }
    });
    monoio::spawn({
        let connection = connection.clone();
        let client = client.clone();
        let counters = inner.counters.clone();
        async move {
            let _open = open;
            let end = read_answers(&mut reader, &connection, &aborted, &limits, &counters).await;
            drop(reader);
            ended(&client, &connection, end);
        }
    });
    connection
}

/// Hands each answer to its waiting call until the connection ends.
async fn read_answers(
    reader: &mut LinkReader,
    connection: &Connection,
    aborted: &flume::Receiver<()>,
    limits: &ValidLimits,
    counters: &PeerCounters,
) -> LinkEnd {
    loop {
        let next = monoio::select! {
            frame = reader.next_frame(limits.idle_timeout, limits.stall_timeout) => frame,
            _ = aborted.recv_async() => return LinkEnd::Closed("the connection was closed"),
        };
        let frame = match next {
            Ok(frame) => frame,
            Err(end) => return end,
        };
        let answer = match frame.kind {
            FrameKind::Pong => continue,
            FrameKind::Response => Answer::Reply(frame.body),
            FrameKind::Failure => match decode_failure(&frame.body) {
                Ok((code, message)) => Answer::Failure(PeerFailure { code, message }),
                Err(error) => return LinkEnd::Frame(error),
            },
            other => {
                return LinkEnd::Protocol(format!(
                    "a {other:?} frame from a server (servers send answers and pongs only)"
                ));
            }
        };
        let waiting = connection.waiting.borrow_mut().remove(&frame.call_id);
        match waiting {
            None => counters.response_discarded(),
            Some(call) if call.channel != frame.channel => {
                return LinkEnd::Protocol(format!(
                    "the answer to call {} names channel {}, the call was on channel {}",
                    frame.call_id, frame.channel, call.channel
                ));
            }
            Some(call) => {
                // The channel holds this one answer; a failed send means the
                // caller stopped waiting.
                if call.answer.try_send(answer).is_err() {
                    counters.response_discarded();
                }
            }
        }
    }
}

/// A connection ended: its calls fail, and the client connects again on
/// its next call (at once: this connection was established, so no
/// back-off).
fn ended(client: &Weak<Inner>, connection: &Rc<Connection>, end: LinkEnd) {
    if connection.ended.borrow().is_some() {
        return;
    }
    let reason = end.to_string();
    connection.end(reason.clone());
    let Some(inner) = client.upgrade() else {
        return;
    };
    let node = inner.target.node_id;
    if end.is_garbage() {
        inner.counters.refused(crate::counters::Refused::Frames);
    } else if end.is_timeout() {
        inner.counters.timed_out();
    }
    match &end {
        LinkEnd::Closed(_) => tracing::debug!(node, %reason, "peer connection closed"),
        LinkEnd::PeerClosed => tracing::info!(node, "peer closed the connection"),
        _ => tracing::warn!(node, %reason, "peer connection lost"),
    }
    let mut state = inner.state.borrow_mut();
    if let State::Up(current) = &*state
        && Rc::ptr_eq(current, connection)
    {
        *state = State::Down {
            failures: 0,
            retry_at: None,
            reason,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::PeerLimits;

    // Proves the back-off doubles from its minimum and stops at its
    // maximum, for any number of failures.
    #[test]
    fn backoff_doubles_up_to_its_maximum() {
        let limits = PeerLimits {
            reconnect_backoff_min: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(1),
            ..PeerLimits::default()
        }
        .validate()
        .unwrap();
        let waits: Vec<u128> = [1, 2, 3, 5, 6, 40, u32::MAX]
            .iter()
            .map(|&failures| backoff(&limits, failures).as_millis())
            .collect();
        assert_eq!(waits, [50, 100, 200, 800, 1000, 1000, 1000]);
    }
}
