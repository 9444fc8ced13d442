//! The serving side: [`serve`] accepts connections from other nodes on
//! one listener, sets each up (`handshake.rs`), then reads its requests and
//! runs the handler for each, concurrently up to the in-flight bound;
//! answers go out through the connection's one writer task.
//!
//! Per connection: a refused setup (TLS, certificate, hello) is one `warn`
//! line naming the peer's address and the reason, a counter, and a close;
//! bytes that are not a valid frame, or a frame a client never sends, end
//! that connection the same way. Nothing else changes: other connections
//! and the listener go on. While `calls_in_flight_max` handlers run (or
//! their request bodies reach `call_bytes_in_flight_max`), the connection
//! reads nothing until one finishes: the peer's writes then wait in TCP,
//! and no queue grows.
//!
//! A stop ([`ServerStop`]) stops accepting and reading; calls already read
//! run to their end (up to `limits.stop_grace`), their answers are sent,
//! and each connection closes with a TLS close_notify. A handler future
//! may also be dropped before it completes: when its connection ends
//! (the answer could not be delivered) or the grace runs out. Handlers
//! must be cancel-safe.
//!
//! A server that stays at its bound for the client's `idle_timeout` (every
//! handler stuck) reads no ping either, and looks dead to the client,
//! which then closes the connection; its calls fail as `Disconnected`.
//!
//! Must not: answer a request twice or not at all while its connection
//! lives, read past the in-flight bound, or let one connection's trouble
//! reach another.

use crate::budget::{Budget, Grant};
use crate::counters::{OpenConnection, PeerCounters, Refused};
use crate::error::{CODE_REPLY_TOO_LARGE, PeerFailure};
use crate::frame::{Frame, FrameKind};
use crate::handshake::{self, Established};
use crate::hello::Hello;
use crate::limits::{ACCEPT_ERROR_PAUSE, ValidLimits};
use crate::link::{LinkEnd, LinkReader, Outbound, run_writer};
use crate::tls::PeerTls;
use monoio::net::{TcpListener, TcpStream};
use std::cell::Cell;
use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

/// A boxed future that stays on its thread (the same type as
/// `futures::future::LocalBoxFuture`).
pub type LocalBoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// What the server runs for each request.
pub type PeerHandler =
    Rc<dyn Fn(PeerRequest) -> LocalBoxFuture<'static, Result<Vec<u8>, PeerFailure>>>;

/// One request, as a handler receives it.
#[derive(Debug)]
pub struct PeerRequest {
    /// The calling node (its certificate names it).
    pub node_id: u64,
    /// The calling node's shard.
    pub shard: u16,
    /// The caller's channel (a Raft group id, say): opaque here.
    pub channel: u64,
    pub body: Vec<u8>,
}

/// Stops the server whose `StopSignal` it was made with: call `stop`, or
/// drop it. Can be sent to another thread.
#[derive(Debug)]
pub struct ServerStop {
    _sender: flume::Sender<()>,
}

impl ServerStop {
    pub fn stop(self) {}
}

/// What a server watches for its stop.
#[derive(Debug, Clone)]
pub struct StopSignal {
    receiver: flume::Receiver<()>,
}

impl StopSignal {
    /// Resolves once the stop was asked for (at once if it already was).
    async fn stopped(&self) {
        // Nothing is ever sent: the receive ends when the sender is gone.
        let _ = self.receiver.recv_async().await;
    }
}

/// A stop handle and the signal `serve` takes.
pub fn stop_signal() -> (ServerStop, StopSignal) {
    let (sender, receiver) = flume::bounded(1);
    (ServerStop { _sender: sender }, StopSignal { receiver })
}

/// What every connection of one server shares.
struct Shared {
    tls: PeerTls,
    shard: u16,
    handler: PeerHandler,
    limits: ValidLimits,
    counters: Arc<PeerCounters>,
    stop: StopSignal,
    /// Connections open now (for `limits.connections_max`).
    live: Cell<usize>,
}

/// Counts a connection in `Shared::live` while it lives.
struct Live(Rc<Shared>);

impl Live {
    fn new(shared: &Rc<Shared>) -> Live {
        shared.live.set(shared.live.get() + 1);
        Live(shared.clone())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.0.live.set(self.0.live.get() - 1);
    }
}

/// Serves node-to-node calls on `listener` as shard `shard` of the node
/// `tls` names, until `stop` fires and every connection has closed.
pub async fn serve(
    listener: TcpListener,
    tls: PeerTls,
    shard: u16,
    handler: PeerHandler,
    limits: ValidLimits,
    counters: Arc<PeerCounters>,
    stop: StopSignal,
) {
    let shared = Rc::new(Shared {
        tls,
        shard,
        handler,
        limits,
        counters,
        stop,
        live: Cell::new(0),
    });
    // Each connection task holds a clone; the receive below ends when the
    // last one is gone.
    let (connections, all_closed) = flume::bounded::<()>(1);
    loop {
        let accepted = monoio::select! {
            accepted = listener.accept() => accepted,
            _ = shared.stop.stopped() => break,
        };
        match accepted {
            Ok((stream, address)) => {
                shared.counters.accepted();
                if shared.live.get() >= shared.limits.connections_max {
                    shared.counters.refused(Refused::Capacity);
                    tracing::warn!(
                        peer = %address,
                        reason = %format!(
                            "{} peer connections are open (limits.connections_max)",
                            shared.live.get()
                        ),
                        "refused a peer connection"
                    );
                    continue;
                }
                monoio::spawn(connection(
                    shared.clone(),
                    stream,
                    address,
                    connections.clone(),
                ));
            }
            Err(error) => {
                tracing::warn!(%error, "accepting a peer connection failed");
                monoio::select! {
                    _ = monoio::time::sleep(ACCEPT_ERROR_PAUSE) => {}
                    _ = shared.stop.stopped() => break,
                }
            }
        }
    }
    // Stop listening now, not when the driver gets round to closing the
    // descriptor (io_uring closes it asynchronously, after the cancelled
    // accept completes): a server started next on the same address
    // (SO_REUSEPORT) must not share incoming connections with this one.
    let _ = nix::sys::socket::shutdown(listener.as_raw_fd(), nix::sys::socket::Shutdown::Both);
    drop(listener);
    drop(connections);
    let _ = all_closed.recv_async().await;
}

/// Why a connection's read loop ended.
enum ReadEnd {
    Stopping,
    WriterEnded,
    Link(LinkEnd),
}

/// One established connection's state that its calls share.
struct Calls {
    shared: Rc<Shared>,
    peer: Hello,
    queue: flume::Sender<Outbound>,
    abort: flume::Receiver<()>,
    budget: Budget,
}

async fn connection(
    shared: Rc<Shared>,
    stream: TcpStream,
    address: SocketAddr,
    _connections: flume::Sender<()>,
) {
    let _live = Live::new(&shared);
    let _open = OpenConnection::new(shared.counters.clone());
    let setup = handshake::accept(
        stream,
        &shared.tls,
        shared.shard,
        &shared.limits,
        &shared.counters,
    );
    let setup = monoio::select! {
        setup = setup => setup,
        _ = shared.stop.stopped() => return,
    };
    let Established {
        mut reader,
        writer,
        peer,
    } = match setup {
        Ok(established) => established,
        Err(refusal) => {
            match refusal.counter() {
                Some(counter) => {
                    shared.counters.refused(counter);
                    tracing::warn!(peer = %address, reason = %refusal, "refused a peer connection");
                }
                None => {
                    tracing::debug!(peer = %address, "a connection closed before its handshake (a probe)")
                }
            }
            return;
        }
    };
    shared.counters.established();
    tracing::info!(
        peer = %address,
        node = peer.node_id,
        shard = peer.shard,
        "peer connected"
    );
    let limits = shared.limits;
    let (queue, queue_receiver) = flume::bounded(limits.write_queue_frames_max);
    // Dropping `abort` ends the writer and every call of the connection.
    let (abort, abort_receiver) = flume::bounded::<()>(1);
    let (writer_alive, writer_done) = flume::bounded::<()>(1);
    reader.flush_through(queue.clone());
    let writer_task = monoio::spawn({
        let abort = abort_receiver.clone();
        async move {
            let _alive = writer_alive;
            run_writer(writer, queue_receiver, abort, None, |_| true).await
        }
    });
    let calls = Calls {
        shared: shared.clone(),
        peer,
        queue,
        abort: abort_receiver,
        budget: Budget::new(limits.calls_in_flight_max, limits.call_bytes_in_flight_max),
    };
    let end = read_calls(&mut reader, &calls, &writer_done).await;
    let node = calls.peer.node_id;
    drop(reader);
    drop(calls);
    let end = match end {
        ReadEnd::Stopping => {
            // The writer ends once every call still running has queued its
            // answer (they hold the last senders), or the grace runs out.
            match monoio::time::timeout(limits.stop_grace, writer_task).await {
                Ok(Ok(())) => Ok("closed for the server's stop".to_string()),
                Ok(Err(end)) => {
                    count_end(&shared.counters, &end);
                    Err(end)
                }
                Err(_) => {
                    drop(abort);
                    Ok(format!(
                        "closed for the server's stop; calls still running after {:?} were \
                         dropped",
                        limits.stop_grace
                    ))
                }
            }
        }
        ReadEnd::WriterEnded => {
            drop(abort);
            match writer_task.await {
                Ok(()) => Ok("closed".to_string()),
                Err(end) => {
                    count_end(&shared.counters, &end);
                    Err(end)
                }
            }
        }
        ReadEnd::Link(end) => {
            count_end(&shared.counters, &end);
            drop(abort);
            let _ = writer_task.await;
            Err(end)
        }
    };
    match end {
        Ok(how) => tracing::info!(peer = %address, node, "peer connection {how}"),
        Err(LinkEnd::PeerClosed) => {
            tracing::info!(peer = %address, node, "peer closed its connection");
        }
        Err(end) => {
            tracing::warn!(peer = %address, node, reason = %end, "closed a peer connection");
        }
    }
}

/// Counts why a connection ended, before it is closed (so whoever sees it
/// closed sees it counted).
fn count_end(counters: &PeerCounters, end: &LinkEnd) {
    if end.is_garbage() {
        counters.refused(Refused::Frames);
    } else if end.is_timeout() {
        counters.timed_out();
    }
}

/// Reads requests and pings until the connection ends or the server
/// stops.
async fn read_calls(
    reader: &mut LinkReader,
    calls: &Calls,
    writer_done: &flume::Receiver<()>,
) -> ReadEnd {
    let shared = &calls.shared;
    let limits = shared.limits;
    loop {
        // The bound: read no request that cannot run now.
        monoio::select! {
            _ = calls.budget.room() => {}
            _ = shared.stop.stopped() => return ReadEnd::Stopping,
            _ = writer_done.recv_async() => return ReadEnd::WriterEnded,
        }
        let next = monoio::select! {
            frame = reader.next_frame(limits.idle_timeout, limits.stall_timeout) => frame,
            _ = shared.stop.stopped() => return ReadEnd::Stopping,
            _ = writer_done.recv_async() => return ReadEnd::WriterEnded,
        };
        let frame = match next {
            Ok(frame) => frame,
            Err(end) => return ReadEnd::Link(end),
        };
        match frame.kind {
            FrameKind::Request => {
                shared.counters.call_received();
                let grant = calls.budget.take(frame.body.len());
                monoio::spawn(run_call(
                    shared.clone(),
                    calls.peer.node_id,
                    calls.peer.shard,
                    frame,
                    grant,
                    calls.queue.clone(),
                    calls.abort.clone(),
                ));
            }
            FrameKind::Ping => {
                let pong = Frame {
                    kind: FrameKind::Pong,
                    call_id: frame.call_id,
                    channel: frame.channel,
                    body: Vec::new(),
                };
                monoio::select! {
                    sent = calls.queue.send_async(Outbound::Frame(pong)) => {
                        if sent.is_err() {
                            return ReadEnd::WriterEnded;
                        }
                    }
                    _ = shared.stop.stopped() => return ReadEnd::Stopping,
                    _ = writer_done.recv_async() => return ReadEnd::WriterEnded,
                }
            }
            other => {
                return ReadEnd::Link(LinkEnd::Protocol(format!(
                    "a {other:?} frame from a client (clients send requests and pings only)"
                )));
            }
        }
    }
}

/// Runs the handler for one request and queues its answer, unless the
/// connection ends first.
async fn run_call(
    shared: Rc<Shared>,
    node_id: u64,
    shard: u16,
    frame: Frame,
    grant: Grant,
    queue: flume::Sender<Outbound>,
    abort: flume::Receiver<()>,
) {
    let (call_id, channel) = (frame.call_id, frame.channel);
    let request = PeerRequest {
        node_id,
        shard,
        channel,
        body: frame.body,
    };
    let handled = (shared.handler)(request);
    let outcome = monoio::select! {
        outcome = handled => outcome,
        _ = abort.recv_async() => return,
    };
    let body_bytes_max = shared.limits.body_bytes_max();
    let answer = match outcome {
        Ok(body) if body.len() <= body_bytes_max => Frame {
            kind: FrameKind::Response,
            call_id,
            channel,
            body,
        },
        Ok(body) => {
            shared.counters.call_failed();
            tracing::warn!(
                node = node_id,
                channel,
                bytes = body.len(),
                "a handler's reply is larger than a frame carries; answered with a failure"
            );
            Frame::failure(
                call_id,
                channel,
                CODE_REPLY_TOO_LARGE,
                &format!(
                    "the reply of {} bytes is larger than the {body_bytes_max} a frame carries",
                    body.len()
                ),
            )
        }
        Err(failure) => {
            shared.counters.call_failed();
            Frame::failure(call_id, channel, failure.code, &failure.message)
        }
    };
    monoio::select! {
        _ = queue.send_async(Outbound::Frame(answer)) => {}
        _ = abort.recv_async() => {}
    }
    drop(grant);
}
