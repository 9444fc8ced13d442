//! How a connection ends when the daemon stops: the client is told to
//! reconnect, in the one way the official SDK understands without
//! surfacing an error. The connection writes an eviction (`NoSession`)
//! instead of answering the next request; the SDK reads it as that
//! request's answer (`Unauthenticated`), reconnects, signs in again and
//! replays the request, which it may since the request was never executed
//! (every request read before stopping is answered; none after it is
//! executed). The write side is then shut down and the connection kept
//! for at most `limits::HANDOVER_LINGER` (its input read and discarded
//! until the client closes, unless a read on it was just cancelled: a TLS
//! stream cannot resume one), so a request that was already on its way
//! does not meet a reset before the client read the eviction.
//!
//! The eviction answers the client's next request, or, when none comes
//! within the grace period, is sent on its own to an idle client (the SDK
//! reads it with its next request). Which request it answers matters: the
//! SDK reconnects on an eviction answering any request but its leader
//! check (GetClusterMetadata, sent right after it signs in), so that one is
//! answered normally (`answered_anyway`) and the eviction goes to the
//! request after it; waiting for the request, rather than sending the
//! eviction right after a reply, is what lets the leader check be told
//! apart.
//!
//! With the listening sockets kept across the restart (`Net::hand_over`),
//! no other request that arrives after the stop began is executed (the
//! grace period is `limits::HANDOVER_GRACE`), and the reconnection waits in
//! the listening socket's queue for the next process. Without, a request
//! that arrives within `limits::STOP_GRACE` is still served.

use crate::limits;
use crate::net::context::NetContext;
use crate::net::session::Session;
use iggyd_wire::protocol::codes::{CommandCode, EvictionReason, Operation};
use iggyd_wire::protocol::header::RequestHeader;
use iggyd_wire::protocol::limits::HEADER_SIZE;
use iggyd_wire::protocol::reply::encode_eviction;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt};

/// Whether a request that arrives while handing over is still answered:
/// GetClusterMetadata, the SDK's leader check right after it signs in. The
/// SDK does not reconnect on an eviction answering it; it goes on on the
/// same connection, and its next request would meet the closed connection
/// (an error the application sees). Answering it costs a read of the
/// metadata view; the request after it gets the eviction.
pub fn answered_anyway(header: &[u8]) -> bool {
    let Ok(bytes) = <&[u8; HEADER_SIZE]>::try_from(header) else {
        return false;
    };
    let request = RequestHeader::decode(bytes);
    request.operation == Operation::NonReplicated as u8
        && request.command_code == CommandCode::GetClusterMetadata as u32
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

/// How the connection got here: between requests (its input may be read
/// on), or from a read that was cancelled (never read again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Linger {
    Read,
    Wait,
}

/// Write the eviction that makes the SDK reconnect and replay, shut the
/// write side down, and keep the connection until the client closes (or,
/// with `Linger::Wait`, in any case) for at most `limits::HANDOVER_LINGER`.
/// Never fails: a client that cannot be told is simply closed.
pub async fn tell_to_reconnect<S: AsyncReadRent + AsyncWriteRent>(
    shard: usize,
    session: &Session,
    stream: &mut S,
    linger: Linger,
) {
    let header = RequestHeader {
        client: session.login.map_or(0, |login| login.client),
        session: session.number(),
        ..RequestHeader::default()
    };
    let frame = encode_eviction(&header, EvictionReason::NoSession).to_vec();
    let written = monoio::time::timeout(limits::HANDOVER_WRITE_TIMEOUT, stream.write_all(frame));
    if !matches!(written.await, Ok((Ok(_), _))) {
        return;
    }
    tracing::debug!(
        shard,
        client_id = session.client_id,
        peer = %session.peer,
        "told the client to reconnect (the daemon stops)"
    );
    let _ = monoio::time::timeout(limits::HANDOVER_WRITE_TIMEOUT, stream.shutdown()).await;
    if linger == Linger::Wait {
        monoio::time::sleep(limits::HANDOVER_LINGER).await;
        return;
    }
    let deadline = std::time::Instant::now() + limits::HANDOVER_LINGER;
    let mut buffer = vec![0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        match monoio::time::timeout(left, stream.read(buffer)).await {
            Ok((Ok(read), returned)) if read > 0 => buffer = returned,
            _ => return,
        }
    }
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
    fn only_the_leader_check_is_answered_while_handing_over() {
        let non_replicated = Operation::NonReplicated as u8;
        assert!(answered_anyway(&header(non_replicated, 12)));
        assert!(!answered_anyway(&header(non_replicated, 1)));
        assert!(!answered_anyway(&header(non_replicated, 20)));
        assert!(!answered_anyway(&header(non_replicated + 1, 12)));
        assert!(!answered_anyway(&header(non_replicated, 12)[..100]));
    }
}
