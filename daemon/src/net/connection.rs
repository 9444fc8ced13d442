//! One client connection on its shard: read a frame (256-byte header, then
//! the body its `size` announces), decode it with the sans-I/O codec, let the
//! handler execute it, write exactly one reply, repeat. One request is in
//! flight per connection (the SDK is lockstep), so replies are in order by
//! construction.
//!
//! Bounded: a frame is at most 64 MiB (checked before anything is
//! allocated), one frame buffer per connection at a time, grown only as
//! body bytes arrive, and a connection that stalls only ever stalls its own
//! task. A frame the codec cannot trust
//! closes the connection; everything else gets the reply the protocol
//! reference prescribes.

use super::handler::{self, Outcome};
use super::session::Session;
use crate::limits;
use crate::protocol::codes::EvictionReason;
use crate::protocol::frame::check_frame_size;
use crate::protocol::limits::HEADER_SIZE;
use crate::shard::context::ShardContext;
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRentExt, AsyncWriteRentExt};
use monoio::net::TcpStream;
use std::net::SocketAddr;
use std::rc::Rc;

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
        }
    }
}

/// Serve one accepted connection until it closes. `client_id` was
/// registered by the acceptor (before this task first runs, so a stopping
/// shard never mistakes a just-accepted connection for none).
pub async fn serve(context: Rc<ShardContext>, stream: TcpStream, peer: SocketAddr, client_id: u32) {
    let mut session = Session::new(client_id, peer);
    let end = run(&context, &mut session, stream).await;
    tracing::debug!(shard = context.shard, client_id, %peer, %end, "connection closed");
    // A disconnect counts as a logout: leave every consumer group.
    handler::session_ended(&context, &mut session).await;
    context.unregister_client(client_id);
}

async fn run(context: &Rc<ShardContext>, session: &mut Session, mut stream: TcpStream) -> End {
    let mut header = vec![0u8; HEADER_SIZE];
    let stop = context.stop_signal();
    loop {
        // While the daemon stops, a connection gets a short grace period to
        // send its next request; an idle one is then closed (its client
        // reconnects to the restarted daemon).
        let grace = async {
            if !context.is_stopping() {
                let _ = stop.recv_async().await;
            }
            monoio::time::sleep(limits::STOP_GRACE).await;
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
        let read = monoio::select! {
            read = stream.read_exact(header) => read,
            _ = grace => return End::Stopping,
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
        let size = u32::from_le_bytes([header[48], header[49], header[50], header[51]]);
        let total = match check_frame_size(size) {
            Ok(total) => total,
            Err(error) => return End::Protocol(error.to_string()),
        };
        // Before login the body is read in chunks that at most double the
        // buffer, so the memory a connection holds follows the bytes its
        // client actually sent, not the size it announced (64 MiB on the
        // word of an unauthenticated client would otherwise be reserved up
        // front). A logged-in client gets its whole frame at once: growing
        // a 1 MiB send by doubling would copy it again on the way.
        let first = if session.login.is_some() {
            total
        } else {
            total.min(HEADER_SIZE + BODY_CHUNK_MIN_BYTES)
        };
        let mut frame = Vec::with_capacity(first);
        frame.extend_from_slice(&header);
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
                    return End::PeerClosed;
                }
                Err(error) => return End::Io(error),
            }
            assert!(frame.len() == start + chunk);
        }
        let request_started = std::time::Instant::now();
        let outcome = handler::handle_frame(context, session, frame).await;
        match outcome {
            Outcome::Reply(reply) => {
                let (result, _) = stream.write_vectored_all(reply).await;
                if let Err(error) = result {
                    return End::Io(error);
                }
                context.record_request(request_started.elapsed());
            }
            Outcome::Close(reason) => return End::Protocol(reason),
            Outcome::Evict(frame) => {
                let _ = stream.write_all(frame).await;
                return End::Revoked;
            }
        }
    }
}
