//! Connections over time: peers that stall during setup or mid-frame are
//! closed at their timeout without holding up anyone else; a server that
//! restarts fails the calls pending on it and is reached again; a graceful
//! stop lets calls in flight finish; a node that cannot be reached is
//! retried after a back-off, not in a loop; idle connections live on
//! pings; a rotated identity is used by new connections while open ones
//! keep theirs.
//!
//! Must not: wait on time except where time is the subject (a back-off,
//! idling).

use crate::harness::{
    CALL, CLUSTER, Logs, Server, client, cluster, echo, echoed, exchange_hellos, guard, handler,
    hello, limits, misbehave, read_until_closed, read_until_socket_closed, tls, tls_session,
};
use iggyd_peer::frame::{Frame, FrameKind};
use iggyd_peer::{PeerError, PeerLimits, PeerRequest};
use std::io::Write;
use std::time::Duration;

crate::on_both_drivers!(
    stalled_peers_time_out_without_blocking_others,
    a_server_restart_fails_pending_calls_and_the_client_reconnects,
    a_graceful_stop_finishes_calls_in_flight,
    an_unreachable_node_is_retried_after_a_back_off_not_in_a_loop,
    an_idle_connection_lives_on_pings,
    a_rotated_identity_is_used_by_new_connections_while_open_ones_keep_theirs,
);

/// A handler that answers channel 0 at once and holds channel 1 until the
/// test opens its gate (telling the test when it started).
fn gated() -> (
    iggyd_peer::PeerHandler,
    flume::Receiver<()>,
    flume::Sender<()>,
) {
    let (started, starts) = flume::unbounded::<()>();
    let (gate, gate_opens) = flume::unbounded::<()>();
    let handler = handler(move |request: PeerRequest| {
        let (started, gate_opens) = (started.clone(), gate_opens.clone());
        async move {
            if request.channel == 1 {
                started.send(()).unwrap();
                let _ = gate_opens.recv_async().await;
            }
            Ok(request.body)
        }
    });
    (handler, starts, gate)
}

// Proves stalls are bounded per connection: a peer that connects and
// sends nothing, and a peer that sends half a frame header after its
// hello, are both still open (connections_open counts them) when an
// honest client's call completes, and are then closed at their timeouts
// (a TLS refusal and a timed-out connection).
async fn stalled_peers_time_out_without_blocking_others() {
    let certs = cluster();
    let short = PeerLimits {
        handshake_timeout: Duration::from_secs(2),
        stall_timeout: Duration::from_secs(2),
        ..limits()
    };
    let server = Server::start(&tls(&certs, 2), short, echo());
    let (silent_connected, silent_connects) = flume::bounded::<()>(1);
    let silent = monoio::spawn(misbehave(server.address, move |mut stream| {
        silent_connected.send(()).unwrap();
        read_until_closed(&mut stream);
    }));
    guard("the silent peer connects", silent_connects.recv_async())
        .await
        .unwrap();
    let (stalled_ready, stalled_readies) = flume::bounded::<()>(1);
    let config = tls(&certs, 1).client_config();
    let stalled = monoio::spawn(misbehave(server.address, move |stream| {
        let mut session = tls_session(stream, config, 2);
        exchange_hellos(&mut session, &hello(CLUSTER, 1, 2));
        let header = Frame {
            kind: FrameKind::Request,
            call_id: 1,
            channel: 1,
            body: vec![0; 100],
        }
        .header();
        session.write_all(&header[..10]).unwrap();
        session.flush().unwrap();
        stalled_ready.send(()).unwrap();
        read_until_socket_closed(session);
    }));
    guard(
        "the stalling peer is mid-frame",
        stalled_readies.recv_async(),
    )
    .await
    .unwrap();
    let (honest, _) = client(&tls(&certs, 1), 2, server.address, short);
    let reply = guard("an honest call", honest.call(9, b"go".to_vec(), CALL)).await;
    assert_eq!(reply.unwrap(), echoed(1, 9, b"go"));
    let during = server.counters.snapshot();
    assert_eq!(during.connections_open, 3, "{during:#?}");
    assert_eq!((during.refused_tls, during.connections_timed_out), (0, 0));
    guard("the silent peer is closed", silent).await;
    guard("the stalling peer is closed", stalled).await;
    let after = server.counters.snapshot();
    assert_eq!((after.refused_tls, after.connections_timed_out), (1, 1));
    server.stop().await;
}

// Proves a restart: a call pending on the old server fails with
// `Disconnected` when the old server stops (its grace runs out with the
// handler still held), a new server on the same address is reached by
// the next call, and the client counts two connections.
async fn a_server_restart_fails_pending_calls_and_the_client_reconnects() {
    let certs = cluster();
    let quick = PeerLimits {
        stop_grace: Duration::from_millis(300),
        ..limits()
    };
    let (held, starts, _gate) = gated();
    let old = Server::start(&tls(&certs, 2), quick, held);
    let address = old.address;
    let (client, counters) = client(&tls(&certs, 1), 2, address, limits());
    let first = guard("a first call", client.call(0, b"1".to_vec(), CALL)).await;
    assert_eq!(first.unwrap(), b"1");
    let pending = monoio::spawn({
        let client = client.clone();
        async move { client.call(1, b"pending".to_vec(), CALL).await }
    });
    guard("the held handler starts", starts.recv_async())
        .await
        .unwrap();
    old.stop().await;
    match guard("the pending call", pending).await {
        Err(PeerError::Disconnected { node: 2, .. }) => {}
        other => panic!("expected Disconnected, got {other:?}"),
    }
    assert!(!client.is_connected());
    let new = Server::start_at(address, &tls(&certs, 2), limits(), echo());
    let again = guard(
        "a call after the restart",
        client.call(4, b"2".to_vec(), CALL),
    )
    .await;
    assert_eq!(again.unwrap(), echoed(1, 4, b"2"));
    let counters = counters.snapshot();
    assert_eq!(
        (
            counters.connections_established,
            counters.calls_disconnected
        ),
        (2, 1)
    );
    new.stop().await;
}

// Proves a graceful stop: once asked to stop the server accepts no one
// (a new client is unreachable) while a call it had already read runs on;
// released, its answer is delivered, and the connection closes with a
// note that the server stopped.
async fn a_graceful_stop_finishes_calls_in_flight() {
    let certs = cluster();
    let logs = Logs::capture();
    let (held, starts, gate) = gated();
    let server = Server::start(&tls(&certs, 2), limits(), held);
    let address = server.address;
    let (client, _) = client(&tls(&certs, 1), 2, address, limits());
    let in_flight = monoio::spawn({
        let client = client.clone();
        async move { client.call(1, b"finish me".to_vec(), CALL).await }
    });
    guard("the held handler starts", starts.recv_async())
        .await
        .unwrap();
    let stopped = monoio::spawn(server.stop());
    let (late, _) = crate::harness::client(&tls(&certs, 3), 2, address, limits());
    let refused = guard(
        "a call to a stopping server",
        late.call(0, Vec::new(), CALL),
    )
    .await;
    assert!(
        matches!(refused, Err(PeerError::Unreachable { .. })),
        "{refused:?}"
    );
    gate.send(()).unwrap();
    let answer = guard("the call in flight", in_flight).await;
    assert_eq!(answer.unwrap(), b"finish me");
    guard("the server stops", stopped).await;
    let closed = logs.at("INFO");
    assert!(
        closed
            .iter()
            .any(|line| line.contains("closed for the server's stop")),
        "{closed:#?}"
    );
}

// Proves the back-off: with nothing listening, a call fails as
// `Unreachable` after one attempt; a call right after fails at once
// without a new attempt (saying when the next one is); once the back-off
// has passed, the next call connects to the server started meanwhile.
async fn an_unreachable_node_is_retried_after_a_back_off_not_in_a_loop() {
    let certs = cluster();
    let address = {
        let reserved = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        reserved.local_addr().unwrap()
    };
    let backing_off = PeerLimits {
        reconnect_backoff_min: Duration::from_millis(500),
        reconnect_backoff_max: Duration::from_secs(2),
        ..limits()
    };
    let (client, counters) = client(&tls(&certs, 1), 2, address, backing_off);
    let first = guard("a call to nobody", client.call(0, Vec::new(), CALL)).await;
    assert!(
        matches!(&first, Err(PeerError::Unreachable { node: 2, reason }) if reason.contains("TCP connect")),
        "{first:?}"
    );
    let server = Server::start_at(address, &tls(&certs, 2), limits(), echo());
    let second = client.call(0, Vec::new(), CALL).await;
    assert!(
        matches!(&second, Err(PeerError::Unreachable { reason, .. }) if reason.contains("next attempt in")),
        "{second:?}"
    );
    let snapshot = counters.snapshot();
    assert_eq!(
        (
            snapshot.connect_attempts,
            snapshot.connect_failures,
            snapshot.calls_unreachable
        ),
        (1, 1, 2)
    );
    // Waiting out the back-off is what this test is about.
    monoio::time::sleep(Duration::from_millis(600)).await;
    let third = guard(
        "a call after the back-off",
        client.call(0, b"up".to_vec(), CALL),
    )
    .await;
    assert_eq!(third.unwrap(), echoed(1, 0, b"up"));
    assert_eq!(counters.snapshot().connect_attempts, 2);
    server.stop().await;
}

// Proves pings keep an idle connection open: with pings every 100 ms and
// an idle timeout of 1 s on both sides, a connection left alone for 2 s
// is still the same one for the next call.
async fn an_idle_connection_lives_on_pings() {
    let certs = cluster();
    let chatty = PeerLimits {
        ping_interval: Duration::from_millis(100),
        idle_timeout: Duration::from_secs(1),
        ..limits()
    };
    let server = Server::start(&tls(&certs, 2), chatty, echo());
    let (client, counters) = client(&tls(&certs, 1), 2, server.address, chatty);
    let first = guard("a first call", client.call(0, b"a".to_vec(), CALL)).await;
    assert_eq!(first.unwrap(), echoed(1, 0, b"a"));
    // Idling is what this test is about.
    monoio::time::sleep(Duration::from_secs(2)).await;
    let second = guard("a call after idling", client.call(0, b"b".to_vec(), CALL)).await;
    assert_eq!(second.unwrap(), echoed(1, 0, b"b"));
    assert_eq!(counters.snapshot().connections_established, 1);
    let served = server.counters.snapshot();
    assert_eq!(
        (served.connections_established, served.connections_timed_out),
        (1, 0)
    );
    server.stop().await;
}

// Proves a certificate rotation (`PeerTls::replace`, which SIGHUP runs):
// node 2's server is rotated to a new CA's identity; a client of the new
// CA then gets in on a new connection and a client of the old CA is
// refused, while the connection opened before the rotation keeps
// working; the same files again change nothing, and another node's
// identity is refused with the running one kept.
async fn a_rotated_identity_is_used_by_new_connections_while_open_ones_keep_theirs() {
    let old = cluster();
    let new = cluster();
    let identity = tls(&old, 2);
    let server = Server::start(&identity, limits(), echo());
    let (before, _) = client(&tls(&old, 1), 2, server.address, limits());
    let reply = guard("a call before", before.call(1, b"a".to_vec(), CALL)).await;
    assert_eq!(reply.unwrap(), echoed(1, 1, b"a"));

    assert_eq!(
        identity.replace(&tls(&new, 2)),
        Ok(iggyd_peer::Replaced::Applied)
    );
    assert_eq!(
        identity.replace(&tls(&new, 2)),
        Ok(iggyd_peer::Replaced::Unchanged)
    );
    let (after, _) = client(&tls(&new, 1), 2, server.address, limits());
    let reply = guard("a call of the new CA", after.call(2, b"b".to_vec(), CALL)).await;
    assert_eq!(reply.unwrap(), echoed(1, 2, b"b"));
    let (stale, _) = client(&tls(&old, 1), 2, server.address, limits());
    let refused = guard("a call of the old CA", stale.call(3, b"c".to_vec(), CALL)).await;
    assert!(
        matches!(refused, Err(PeerError::Unreachable { node: 2, .. })),
        "{refused:?}"
    );
    let reply = guard(
        "a call on the open connection",
        before.call(4, b"d".to_vec(), CALL),
    )
    .await;
    assert_eq!(reply.unwrap(), echoed(1, 4, b"d"));

    let refused = identity.replace(&tls(&new, 3));
    assert!(
        matches!(&refused, Err(iggyd_peer::PeerTlsError::Certificate(why)) if why.contains("node 3")),
        "{refused:?}"
    );
    let (kept, _) = client(&tls(&new, 1), 2, server.address, limits());
    let reply = guard(
        "a call after the refusal",
        kept.call(5, b"e".to_vec(), CALL),
    )
    .await;
    assert_eq!(reply.unwrap(), echoed(1, 5, b"e"));
    server.stop().await;
}
