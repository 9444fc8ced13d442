//! One client connection on its shard: check what the client speaks (its
//! first byte: a TLS record on a TLS port, anything else on a plaintext
//! one), complete the TLS handshake when the port is a TLS port, then read
//! a frame (256-byte header, then the body its `size` announces), decode it
//! with the sans-I/O codec, let the handler execute it, write exactly one
//! reply, repeat. One request is in flight per connection (the SDK is
//! lockstep), so replies are in order by construction.
//!
//! Bounded: a frame is at most 64 MiB (checked before anything is
//! allocated); before login at most `limits.max_login_frame_size`, and a
//! larger one is answered with an eviction and closed without its body
//! being read. One frame buffer per connection at a time. A connection must
//! log in within `limits.login_timeout` of its accept (handshake included),
//! and a logged-in one that stays silent for `limits.idle_timeout` is
//! closed; a connection that stalls only ever stalls its own task. A frame
//! the codec cannot trust closes the connection; everything else gets the
//! reply the protocol reference prescribes.
//!
//! Every way a connection ends that a hostile client can cause is counted
//! (`net::admission`'s security counters) and, where an operator should
//! hear of it, logged at most once per interval per shard. A read that a
//! timer won is never followed by another read on the same stream (the TLS
//! stream cannot resume one): the connection ends.

use super::handler::{self, Outcome};
use super::handover;
use super::session::Session;
use super::tls::{TLS_HANDSHAKE_RECORD, peek_first_byte};
use crate::net::admission::{SecurityCounters, Ticket};
use crate::net::context::NetContext;
use iggyd_wire::protocol::codes::{EvictionReason, HEADER_COMMAND_REQUEST};
use iggyd_wire::protocol::frame::check_frame_size;
use iggyd_wire::protocol::header::{RequestHeader, declared_size};
use iggyd_wire::protocol::limits::HEADER_SIZE;
use iggyd_wire::protocol::reply::encode_eviction;
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncReadRentExt, AsyncWriteRent, AsyncWriteRentExt};
use monoio::net::TcpStream;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// The first body read reserves at most this much; later reads at most
/// double the buffer.
const BODY_CHUNK_MIN_BYTES: usize = 64 * 1024;

/// Why a connection ended (for the debug log).
enum End {
    PeerClosed,
    Io(std::io::Error),
    Protocol(String),
    Stale,
    Revoked,
    Stopping,
    /// Not logged in within `limits.login_timeout`.
    LoginTimeout,
    /// Logged in, silent for `limits.idle_timeout`.
    Idle,
    /// A frame larger than `limits.max_login_frame_size` before login.
    LoginFrameTooLarge(usize),
    /// `limits.login_failures_before_close` failed logins.
    LoginFailures,
    /// Plaintext on a TLS port or TLS on a plaintext port.
    Mismatch(&'static str),
    /// The TLS handshake failed.
    Handshake(std::io::Error),
    /// An operator closed it from the admin socket.
    Closed,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::PeerClosed => f.write_str("closed by the peer"),
            End::Io(error) => write!(f, "I/O error: {error}"),
            End::Protocol(reason) => write!(f, "protocol error: {reason}"),
            End::Stale => f.write_str("stale consumer-group member evicted"),
            End::Revoked => f.write_str("login revoked by a metadata change"),
            End::Stopping => f.write_str("idle while the daemon stops"),
            End::LoginTimeout => f.write_str("no login within limits.login_timeout"),
            End::Idle => f.write_str("silent for limits.idle_timeout"),
            End::LoginFrameTooLarge(size) => {
                write!(f, "a {size}-byte frame before login")
            }
            End::LoginFailures => f.write_str("too many failed logins"),
            End::Mismatch(what) => f.write_str(what),
            End::Handshake(error) => write!(f, "TLS handshake failed: {error}"),
            End::Closed => f.write_str("closed from the admin socket"),
        }
    }
}

/// Serve one accepted connection until it closes. `client_id` was
/// registered by the acceptor (before this task first runs, so a stopping
/// shard never mistakes a just-accepted connection for none); `ticket` is
/// its place in the connection caps, freed when the task ends.
pub async fn serve(
    context: Rc<NetContext>,
    stream: TcpStream,
    peer: SocketAddr,
    client_id: u32,
    ticket: Ticket,
) {
    let mut session = Session::new(client_id, peer);
    session.activity = context.client_activity(client_id);
    let login_deadline = Instant::now() + context.net.limits.login_timeout;
    let end = serve_stream(&context, &mut session, stream, login_deadline).await;
    count_end(&context, &session, &end);
    tracing::debug!(shard = context.shard, client_id, %peer, %end, "connection closed");
    // A disconnect counts as a logout: leave every consumer group.
    context.net.session_gone(session.number());
    handler::session_ended(&context, &mut session).await;
    context.unregister_client(client_id);
    drop(ticket);
}

/// Counters and the (rate-limited) log lines an operator needs about how
/// a connection ended.
fn count_end(context: &NetContext, session: &Session, end: &End) {
    let counters = &context.net.admission.counters;
    let peer = session.peer;
    match end {
        End::LoginTimeout => {
            SecurityCounters::bump(&counters.timeouts);
            if let Some(suppressed) = context.notice("login-timeout") {
                tracing::info!(
                    shard = context.shard,
                    %peer,
                    suppressed,
                    "closed a connection that did not log in within limits.login_timeout"
                );
            }
        }
        End::Idle => SecurityCounters::bump(&counters.timeouts),
        End::Stale | End::LoginFailures => SecurityCounters::bump(&counters.evictions),
        End::Mismatch(what) => {
            SecurityCounters::bump(&counters.tls_failures);
            if let Some(suppressed) = context.notice("tls-mismatch") {
                tracing::warn!(shard = context.shard, %peer, suppressed, "{what}");
            }
        }
        End::Handshake(error) => {
            SecurityCounters::bump(&counters.tls_failures);
            if let Some(suppressed) = context.notice("tls-handshake") {
                tracing::warn!(
                    shard = context.shard,
                    %peer,
                    suppressed,
                    %error,
                    "TLS handshake failed (a client that does not trust this certificate, or \
                     without a certificate from tcp.tls.client_ca_file?)"
                );
            }
        }
        _ => {}
    }
}

/// Time left until `deadline`.
fn until(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// `future`, unless `limit` passes first (`None`: no limit).
async fn within<F: Future>(limit: Option<Duration>, future: F) -> Option<F::Output> {
    match limit {
        None => Some(future.await),
        Some(limit) => monoio::select! {
            output = future => Some(output),
            _ = monoio::time::sleep(limit) => None,
        },
    }
}

/// Check what the client speaks, shake hands when the port is a TLS port,
/// and serve frames.
async fn serve_stream(
    context: &Rc<NetContext>,
    session: &mut Session,
    stream: TcpStream,
    login_deadline: Instant,
) -> End {
    let first = monoio::select! {
        first = within(Some(until(login_deadline)), peek_first_byte(&stream)) => Some(first),
        _ = handover::stopped_for_hand_over(context) => None,
    };
    let Some(first) = first else {
        // Nothing sent yet and the daemon hands over: on a plaintext port
        // the eviction answers whatever comes first; a TLS client is
        // closed before its handshake, which its connect retries.
        if context.net.tls.is_none() {
            let mut stream = stream;
            if handover::evict(context, session, &mut stream).await {
                handover::close_unread(&mut stream).await;
            }
        }
        return End::Stopping;
    };
    let first = match first {
        None => return End::LoginTimeout,
        Some(Ok(None)) => return End::PeerClosed,
        Some(Ok(Some(byte))) => byte,
        Some(Err(error)) => return End::Io(error),
    };
    let Some(tls) = &context.net.tls else {
        if first == TLS_HANDSHAKE_RECORD {
            return End::Mismatch(
                "a TLS client on the plaintext Iggy port: the client has tls_enabled while \
                 tcp.tls.enabled is false (closed)",
            );
        }
        return run(context, session, stream, login_deadline, Resumable::Yes).await;
    };
    if first != TLS_HANDSHAKE_RECORD {
        return End::Mismatch(
            "a plaintext client on the TLS Iggy port: the client needs tls_enabled (and \
             tls_domain, tls_ca_file), since tcp.tls.enabled is true (closed)",
        );
    }
    let acceptor = monoio_rustls::TlsAcceptor::from(tls.config());
    match within(Some(until(login_deadline)), acceptor.accept(stream)).await {
        None => End::LoginTimeout,
        Some(Err(error)) => End::Handshake(error.into()),
        Some(Ok(stream)) => {
            if let Some(activity) = &session.activity {
                activity.set_tls();
            }
            run(context, session, stream, login_deadline, Resumable::No).await
        }
    }
}

/// Whether a read that a timer won may be followed by another read on the
/// stream: a plaintext stream may, a TLS stream cannot resume one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resumable {
    Yes,
    No,
}

/// The frame loop, over a plaintext or a TLS stream.
async fn run<S: AsyncReadRent + AsyncWriteRent>(
    context: &Rc<NetContext>,
    session: &mut Session,
    mut stream: S,
    login_deadline: Instant,
    resumable: Resumable,
) -> End {
    let limits = context.net.limits;
    let mut header = vec![0u8; HEADER_SIZE];
    let stop = context.stop_signal();
    // Once the client was told to reconnect (`net::handover`): until when
    // what it still sends is served, and whether the eviction went out
    // unasked and answers the next request.
    let mut lingering: Option<Instant> = None;
    let mut answered_unasked = false;
    loop {
        // While the daemon stops, a connection gets a short grace period to
        // send its next request (served; when handing over, answered with
        // the eviction instead); an idle one is then told to reconnect.
        // After the eviction, the linger period.
        let grace = async {
            match lingering {
                Some(deadline) => monoio::time::sleep(until(deadline)).await,
                None => {
                    if !context.is_stopping() {
                        let _ = stop.recv_async().await;
                    }
                    monoio::time::sleep(handover::grace(context)).await;
                }
            }
        };
        // A consumer-group member that sends nothing for too long is stale
        // (§8 item 7): it is evicted and its partitions move on.
        let stale = async {
            if session.memberships.is_empty() {
                std::future::pending::<()>().await;
            }
            monoio::time::sleep(context.stale_after).await;
        };
        // A metadata view that revokes the login (user deleted or set
        // inactive, rights or token withdrawn) ends an idle session at once.
        let ended = session.ended.clone();
        let revoked = async move {
            match ended {
                Some(ended) => ended.recv_async().await.ok(),
                None => None,
            }
        };
        let revoked = async move {
            match revoked.await {
                Some(revoked) => revoked,
                None => std::future::pending().await,
            }
        };
        let logged_in = session.login.is_some();
        // Before login the deadline counts from the accept; after, silence.
        let quiet_limit = if logged_in {
            limits.idle_timeout
        } else {
            Some(until(login_deadline))
        };
        let quiet = async {
            match quiet_limit {
                Some(limit) => monoio::time::sleep(limit).await,
                None => std::future::pending::<()>().await,
            }
        };
        let closed = session.activity.as_ref().map(|activity| activity.closed());
        let closed = async move {
            match closed {
                Some(closed) => {
                    let _ = closed.recv_async().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let read = monoio::select! {
            read = stream.read_exact(header) => read,
            _ = grace => {
                if lingering.is_some() {
                    return End::Stopping;
                }
                if !handover::evict(context, session, &mut stream).await {
                    return End::Stopping;
                }
                if resumable == Resumable::No {
                    handover::close_unread(&mut stream).await;
                    return End::Stopping;
                }
                lingering = Some(Instant::now() + crate::limits::HANDOVER_LINGER);
                answered_unasked = true;
                // The cancelled read kept its buffer.
                header = vec![0u8; HEADER_SIZE];
                continue;
            }
            _ = closed => return End::Closed,
            _ = quiet => return if logged_in { End::Idle } else { End::LoginTimeout },
            _ = stale => {
                handler::evict(context, session, &mut stream, EvictionReason::StaleClient).await;
                return End::Stale;
            }
            revoked = revoked => {
                let reason = handler::eviction_of(revoked);
                handler::evict(context, session, &mut stream, reason).await;
                return End::Revoked;
            }
        };
        let (result, buffer) = read;
        header = buffer;
        match result {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                return End::PeerClosed;
            }
            Err(error) => return End::Io(error),
        }
        let total = match declared_size(&header).map(check_frame_size) {
            Some(Ok(total)) => total,
            Some(Err(error)) => return End::Protocol(error.to_string()),
            None => return End::Protocol("a short header".to_string()),
        };
        if session.login.is_none() && total > limits.login_frame_bytes_max {
            return refuse_login_frame(context, session, &header, total, &mut stream).await;
        }
        let frame = match within(
            quiet_limit,
            read_body(&mut stream, &header, total, logged_in),
        )
        .await
        {
            None if logged_in => return End::Idle,
            None => return End::LoginTimeout,
            Some(Ok(frame)) => frame,
            Some(Err(end)) => return end,
        };
        if answered_unasked {
            // The eviction sent unasked was this request's answer.
            answered_unasked = false;
            continue;
        }
        // Handing over, a request that arrives after the stop began is not
        // executed: the eviction is its answer, and the SDK replays it on
        // the next process (but for what the SDK sends on its own, see
        // `handover::answered_anyway`). What follows it is served.
        if lingering.is_none()
            && context.net.hand_over
            && context.is_stopping()
            && !handover::answered_anyway(&header)
        {
            if !handover::evict(context, session, &mut stream).await {
                return End::Stopping;
            }
            lingering = Some(Instant::now() + crate::limits::HANDOVER_LINGER);
            continue;
        }
        let request_started = std::time::Instant::now();
        if let Some(activity) = &session.activity {
            let code = header
                .get(196..200)
                .and_then(|code| <[u8; 4]>::try_from(code).ok());
            activity.request(code.map_or(0, u32::from_le_bytes), frame.len());
        }
        let outcome = handler::handle_frame(context, session, frame).await;
        match outcome {
            Outcome::Reply(reply) => {
                if let Some(activity) = &session.activity {
                    activity.replied(reply.len());
                }
                match reply.write_all(&mut stream, limits.idle_timeout).await {
                    Ok(()) => {}
                    // A client that stopped reading its reply.
                    Err(error) if error.kind() == std::io::ErrorKind::TimedOut => return End::Idle,
                    Err(error) => return End::Io(error),
                }
                context.record_request(request_started.elapsed());
            }
            Outcome::Close(reason) => return End::Protocol(reason),
            Outcome::Evict(frame) => {
                let _ = stream.write_all(frame).await;
                return End::Revoked;
            }
        }
        if session.close_after_reply {
            return End::LoginFailures;
        }
    }
}

/// Read the body a `header` announced (`total` bytes with the header) into
/// one buffer that starts with the header. Before login the body is read in
/// chunks that at most double the buffer, so the memory a connection holds
/// follows the bytes its client actually sent, not the size it announced.
/// A logged-in client gets its whole frame at once: growing a 1 MiB send by
/// doubling would copy it again on the way.
async fn read_body<S: AsyncReadRent>(
    stream: &mut S,
    header: &[u8],
    total: usize,
    logged_in: bool,
) -> Result<Vec<u8>, End> {
    let first = if logged_in {
        total
    } else {
        total.min(HEADER_SIZE + BODY_CHUNK_MIN_BYTES)
    };
    let mut frame = Vec::with_capacity(first);
    frame.extend_from_slice(header);
    while frame.len() < total {
        let start = frame.len();
        let chunk = (total - start).min(
            start
                .max(BODY_CHUNK_MIN_BYTES)
                .max(frame.capacity() - start),
        );
        frame.reserve_exact(chunk);
        let (result, body) = stream
            .read_exact(frame.slice_mut(start..start + chunk))
            .await;
        frame = body.into_inner();
        match result {
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(End::PeerClosed);
            }
            Err(error) => return Err(End::Io(error)),
        }
        assert!(frame.len() == start + chunk);
    }
    Ok(frame)
}

/// Write one reply (or eviction) frame whole.
async fn write_reply<S: AsyncWriteRent>(stream: &mut S, reply: Vec<u8>) -> std::io::Result<()> {
    let (result, _) = stream.write_all(reply).await;
    result.map(drop)
}

/// A frame over `limits.max_login_frame_size` before login: answer with an
/// eviction (InvalidRequestBodySize, which the SDK reports as an invalid
/// command) and close, without reading the body. A header that is not a
/// request gets no answer at all, as any untrustworthy framing.
async fn refuse_login_frame<S: AsyncWriteRent>(
    context: &NetContext,
    session: &Session,
    header: &[u8],
    total: usize,
    stream: &mut S,
) -> End {
    SecurityCounters::bump(&context.net.admission.counters.frames_refused);
    if let Some(suppressed) = context.notice("login-frame") {
        tracing::warn!(
            shard = context.shard,
            peer = %session.peer,
            size = total,
            max = context.net.limits.login_frame_bytes_max,
            suppressed,
            "refused a frame larger than limits.max_login_frame_size before login (closed \
             without reading it)"
        );
    }
    let Ok(bytes) = <[u8; HEADER_SIZE]>::try_from(header) else {
        return End::LoginFrameTooLarge(total);
    };
    let request = RequestHeader::decode(&bytes);
    if request.command == HEADER_COMMAND_REQUEST {
        let eviction = encode_eviction(&request, EvictionReason::InvalidRequestBodySize);
        let _ = write_reply(stream, eviction.to_vec()).await;
    }
    End::LoginFrameTooLarge(total)
}
