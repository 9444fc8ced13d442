//! How a connection ends when the daemon stops: the client is told to
//! reconnect, in the one way the official SDK understands without
//! surfacing an error. The connection sends an eviction (`NoSession`); the
//! SDK reads it as the answer to a request (`Unauthenticated`), reconnects,
//! signs in again and replays that request, which it may: the request the
//! eviction answers is never executed.
//!
//! One eviction answers exactly one request. It answers the client's next
//! request, or, when none comes within the grace period, is sent unasked to
//! an idle client and answers the request that comes next (read and
//! dropped). Whatever the client sends after that request is served as
//! usual until the client closes or `limits::HANDOVER_LINGER` passes: an
//! SDK client shares its connection between the application and its
//! heartbeat, and a second request already on its way must get its own
//! answer (a closed connection or a second eviction makes both callers
//! reconnect at once, and `iggy` 0.11.0 then tears down the fresh
//! connection one of them made: an error the application sees).
//!
//! What the SDK sends on its own (its sign-in, its leader check, its
//! heartbeat) is answered as usual (`answered_anyway`), so the eviction
//! goes to a request of the application, which reconnects and replays.
//! And a client is told only once every shard of this process stopped
//! accepting (`Accepting`), so its new connection waits for the next
//! process.
//!
//! With the listening sockets kept across the restart (`Net::hand_over`),
//! no other request that arrives after the stop began is executed (the
//! grace period is `limits::HANDOVER_GRACE`), and the reconnection
//! waits in the listening socket's queue for the next process. Without, a
//! request that arrives within `limits::STOP_GRACE` is still served.

use crate::limits;
use crate::net::context::NetContext;
use crate::net::session::Session;
use iggyd_wire::protocol::codes::{CommandCode, EvictionReason, Operation};
use iggyd_wire::protocol::header::RequestHeader;
use iggyd_wire::protocol::limits::HEADER_SIZE;
use iggyd_wire::protocol::reply::encode_eviction;
use monoio::io::{AsyncWriteRent, AsyncWriteRentExt};

/// Whether a request that arrives while handing over is still answered as
/// usual: those the SDK sends on its own and does not take an eviction
/// well on. Its sign-in (Register; the SDK's replay of an evicted sign-in
/// runs a second connect inside the first), its leader check right after
/// (GetClusterMetadata: it does not reconnect on an eviction answering it,
/// and its next request meets a closed connection) and its heartbeat
/// (Ping: the heartbeat would do the reconnect, and the application's own
/// requests fail while it waits). The eviction goes to the application's
/// next request.
pub fn answered_anyway(header: &[u8]) -> bool {
    let Ok(bytes) = <&[u8; HEADER_SIZE]>::try_from(header) else {
        return false;
    };
    let request = RequestHeader::decode(bytes);
    request.operation == Operation::Register as u8
        || (request.operation == Operation::NonReplicated as u8
            && [CommandCode::Ping, CommandCode::GetClusterMetadata]
                .iter()
                .any(|code| request.command_code == *code as u32))
}

/// Shards whose listener still accepts, shared by every shard: a client is
/// told to reconnect only once no shard of this process accepts any more,
/// so that its new connection waits for the next process instead of
/// landing on a shard of this one that is about to stop too.
#[derive(Debug)]
pub struct Accepting(std::sync::atomic::AtomicUsize);

impl Accepting {
    pub fn new(shards: usize) -> std::sync::Arc<Accepting> {
        std::sync::Arc::new(Accepting(std::sync::atomic::AtomicUsize::new(shards)))
    }

    /// A shard's listener stopped accepting (once per shard).
    pub fn stopped(&self) {
        let _ = self.0.fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |left| left.checked_sub(1),
        );
    }

    pub fn none_left(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Acquire) == 0
    }
}

/// Wait until no shard accepts any more (at most
/// `limits::HANDOVER_ACCEPT_WAIT`: a shard that never stops accepting
/// delays its neighbours' clients by no more).
pub async fn after_every_listener_stopped(context: &NetContext) {
    let deadline = std::time::Instant::now() + limits::HANDOVER_ACCEPT_WAIT;
    while !context.net.accepting.none_left() && std::time::Instant::now() < deadline {
        monoio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// How long a stopping daemon waits for a connection's next request before
/// telling it to reconnect unasked.
pub fn grace(context: &NetContext) -> std::time::Duration {
    if context.net.hand_over {
        limits::HANDOVER_GRACE
    } else {
        limits::STOP_GRACE
    }
}

/// Resolves once the daemon stops and hands its listeners over; never
/// otherwise (for a `select!` branch).
pub async fn stopped_for_hand_over(context: &NetContext) {
    if !context.net.hand_over {
        std::future::pending::<()>().await;
    }
    if !context.is_stopping() {
        let _ = context.stop_signal().recv_async().await;
    }
}

/// Write the eviction that makes the SDK reconnect and replay; false when
/// it could not be written (the client is then simply closed).
pub async fn evict<S: AsyncWriteRent>(
    context: &NetContext,
    session: &Session,
    stream: &mut S,
) -> bool {
    after_every_listener_stopped(context).await;
    let shard = context.shard;
    let header = RequestHeader {
        client: session.login.map_or(0, |login| login.client),
        session: session.number(),
        ..RequestHeader::default()
    };
    let frame = encode_eviction(&header, EvictionReason::NoSession).to_vec();
    let written = monoio::time::timeout(limits::HANDOVER_WRITE_TIMEOUT, stream.write_all(frame));
    let told = matches!(written.await, Ok((Ok(_), _)));
    if told {
        tracing::debug!(
            shard,
            client_id = session.client_id,
            peer = %session.peer,
            "told the client to reconnect (the daemon stops)"
        );
    }
    told
}

/// After an eviction on a stream that may not be read again (a TLS stream
/// whose read was cancelled, a client that never spoke): shut the write
/// side down and keep the connection `limits::HANDOVER_LINGER`, so a
/// request already on its way does not meet a reset before the client
/// read the eviction.
pub async fn close_unread<S: AsyncWriteRent>(stream: &mut S) {
    let _ = monoio::time::timeout(limits::HANDOVER_WRITE_TIMEOUT, stream.shutdown()).await;
    monoio::time::sleep(limits::HANDOVER_LINGER).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(operation: u8, code: u32) -> [u8; HEADER_SIZE] {
        let mut header = [0u8; HEADER_SIZE];
        header[60] = 5;
        header[176] = operation;
        header[196..200].copy_from_slice(&code.to_le_bytes());
        header
    }

    #[test]
    fn only_what_the_sdk_sends_on_its_own_is_answered_while_handing_over() {
        let non_replicated = Operation::NonReplicated as u8;
        assert!(answered_anyway(&header(non_replicated, 12)));
        assert!(answered_anyway(&header(non_replicated, 1)));
        assert!(answered_anyway(&header(Operation::Register as u8, 0)));
        assert!(!answered_anyway(&header(non_replicated, 20)));
        assert!(!answered_anyway(&header(non_replicated, 100)));
        assert!(!answered_anyway(&header(Operation::SendMessages as u8, 0)));
        assert!(!answered_anyway(&header(
            Operation::StoreConsumerOffset as u8,
            12
        )));
        assert!(!answered_anyway(&header(non_replicated, 12)[..100]));
    }
}
