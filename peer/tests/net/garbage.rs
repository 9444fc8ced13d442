//! Seeded garbage, many connections at a time one after the other: bytes
//! that are no TLS before the handshake (random, a mutated or cut real
//! ClientHello, a TLS record header over random bytes), and bytes that are
//! no clean frame stream after an honest handshake and hello (random,
//! valid frames with flipped bytes, cut short, or followed by random
//! bytes). After each connection the server's counters must equal what a
//! model predicts for its bytes (the crate's own `FrameDecoder` and the
//! server's rule: requests run, pings are answered, anything else ends
//! the connection), and afterwards an honest client is served. A panic
//! anywhere in the server fails the test (it runs on the test's thread).
//!
//! Must not: leave a connection open (each misbehaving peer closes its
//! sending side and reads until the server closed) or depend on timing.

use crate::harness::{
    CALL, CLUSTER, Server, client, cluster, echo, echoed, exchange_hellos, guard, hello, limits,
    misbehave, read_until_closed, read_until_socket_closed, tls, tls_session,
};
use iggyd_peer::frame::{Frame, FrameDecoder, FrameKind};
use iggyd_peer::{ClusterCerts, CountersSnapshot};
use iggyd_testkit::rng::Rng;
use std::io::Write;
use std::net::Shutdown;

crate::on_both_drivers!(
    seeded_garbage_before_the_handshake_is_refused_and_never_hurts_the_server,
    seeded_garbage_after_the_hello_ends_only_its_connection,
);

/// Connections per test.
const CASES: usize = 48;

/// Proves an honest client still gets its answer from `server`.
async fn still_serves(server: &Server, certs: &ClusterCerts) {
    let (honest, _) = client(&tls(certs, 1), 2, server.address, limits());
    let reply = guard("an honest call", honest.call(5, b"still".to_vec(), CALL)).await;
    assert_eq!(reply.unwrap(), echoed(1, 5, b"still"));
}

/// Stops `server` (which waits for every connection to close) and checks
/// that its gauge of open connections came back to zero.
async fn stops_with_nothing_open(server: Server) {
    let counters = server.counters.clone();
    server.stop().await;
    assert_eq!(counters.snapshot().connections_open, 0);
}

/// The first flight of a real TLS client (node 1 reaching node 2): its
/// ClientHello record.
fn client_hello(certs: &ClusterCerts) -> Vec<u8> {
    let name = rustls::pki_types::ServerName::try_from(format!("node-2.{CLUSTER}")).unwrap();
    let mut session = rustls::ClientConnection::new(tls(certs, 1).client_config(), name).unwrap();
    let mut bytes = Vec::new();
    while session.wants_write() {
        session.write_tls(&mut bytes).unwrap();
    }
    assert_eq!(bytes[0], 0x16, "a handshake record");
    bytes
}

/// Flips `count` random bytes of `bytes` to random values.
fn flip(rng: &mut Rng, bytes: &mut [u8], count: usize) {
    for _ in 0..count {
        let at = rng.index(bytes.len());
        bytes[at] ^= 1 + rng.below(255) as u8;
    }
}

// Proves the server survives and refuses, at the TLS handshake, every one
// of 48 seeded inputs that are no TLS client: each connection is counted
// as accepted and refused (TLS) before the peer sees it closed, none is
// established, an honest client is served afterwards, and once the server
// stopped no connection is counted open.
async fn seeded_garbage_before_the_handshake_is_refused_and_never_hurts_the_server() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    let real_hello = client_hello(&certs);
    let seed = 0x6A2B_0B1F;
    let mut rng = Rng(seed);
    for case in 0..CASES {
        let bytes = match case % 4 {
            0 => {
                let len = 1 + rng.index(4096);
                rng.bytes(len)
            }
            1 => {
                let mut bytes = real_hello.clone();
                let count = 1 + rng.index(8);
                flip(&mut rng, &mut bytes, count);
                bytes
            }
            2 => real_hello[..1 + rng.index(real_hello.len() - 1)].to_vec(),
            _ => {
                let len = rng.index(1 << 15);
                let mut bytes = vec![0x16, 0x03, 0x01];
                bytes.extend_from_slice(&(len as u16).to_be_bytes());
                let body = rng.index(len + 1);
                bytes.extend(rng.bytes(body));
                bytes
            }
        };
        misbehave(server.address, move |mut stream| {
            // The server may refuse before it took everything.
            let _ = stream.write_all(&bytes);
            let _ = stream.shutdown(Shutdown::Write);
            read_until_closed(&mut stream);
        })
        .await;
        let counters = server.counters.snapshot();
        let expected = (case as u64 + 1, case as u64 + 1, 0);
        let found = (
            counters.connections_accepted,
            counters.refused_tls,
            counters.connections_established,
        );
        assert_eq!(found, expected, "seed {seed:#x} case {case}: {counters:#?}");
    }
    still_serves(&server, &certs).await;
    stops_with_nothing_open(server).await;
}

/// What the server does with `bytes` after the hello, by the crate's own
/// decoder and the server's rule: how many requests it runs, and whether
/// it ends the connection for the bytes (an invalid frame, or a kind
/// clients never send). Bytes that stop mid-frame are no refusal: the
/// peer closed.
fn model(bytes: &[u8], frame_bytes_max: usize) -> (u64, bool) {
    let mut decoder = FrameDecoder::new(frame_bytes_max);
    let mut rest = bytes;
    let mut requests = 0;
    loop {
        match decoder.push(&mut rest) {
            Err(_) => return (requests, true),
            Ok(None) => return (requests, false),
            Ok(Some(frame)) => match frame.kind {
                FrameKind::Request => requests += 1,
                FrameKind::Ping => {}
                _ => return (requests, true),
            },
        }
    }
}

/// One to five valid frames a client may send: requests (random channel
/// and body) and pings.
fn valid_frames(rng: &mut Rng) -> Vec<u8> {
    let mut bytes = Vec::new();
    for call_id in 0..1 + rng.below(5) {
        let frame = if rng.below(4) == 0 {
            Frame {
                kind: FrameKind::Ping,
                call_id,
                channel: 0,
                body: Vec::new(),
            }
        } else {
            let len = rng.index(300);
            Frame {
                kind: FrameKind::Request,
                call_id,
                channel: rng.next_u64(),
                body: rng.bytes(len),
            }
        };
        bytes.extend(frame.to_bytes());
    }
    bytes
}

// Proves garbage after an honest setup ends that connection only, and
// exactly as the model says: over 48 seeded inputs (random bytes, valid
// frames with flipped bytes, cut short, or followed by random bytes),
// after each connection the server has run exactly the requests before
// the first bad frame and counted a refusal exactly when there was one;
// an honest client is served afterwards, and once the server stopped no
// connection is counted open.
// The generator is checked to have produced both refusals and requests.
async fn seeded_garbage_after_the_hello_ends_only_its_connection() {
    let certs = cluster();
    let server_limits = limits();
    let server = Server::start(&tls(&certs, 2), server_limits, echo());
    let config = tls(&certs, 1).client_config();
    let seed = 0x6A2B_0A4E;
    let mut rng = Rng(seed);
    let mut expected = CountersSnapshot::default();
    for case in 0..CASES {
        let bytes = match case % 4 {
            0 => {
                let len = 1 + rng.index(2000);
                rng.bytes(len)
            }
            1 => {
                let mut bytes = valid_frames(&mut rng);
                let count = 1 + rng.index(4);
                flip(&mut rng, &mut bytes, count);
                bytes
            }
            2 => {
                let bytes = valid_frames(&mut rng);
                let cut = rng.index(bytes.len());
                bytes[..cut].to_vec()
            }
            _ => {
                let mut bytes = valid_frames(&mut rng);
                let len = 1 + rng.index(100);
                bytes.extend(rng.bytes(len));
                bytes
            }
        };
        let (requests, refused) = model(&bytes, server_limits.frame_bytes_max);
        expected.connections_established += 1;
        expected.calls_received += requests;
        expected.refused_frames += u64::from(refused);
        let config = config.clone();
        misbehave(server.address, move |stream| {
            let mut session = tls_session(stream, config, 2);
            exchange_hellos(&mut session, &hello(CLUSTER, 1, 2));
            // The server may end the connection before it took everything.
            let _ = session.write_all(&bytes);
            session.conn.send_close_notify();
            let _ = session.flush();
            let _ = session.sock.shutdown(Shutdown::Write);
            read_until_socket_closed(session);
        })
        .await;
        let counters = server.counters.snapshot();
        let found = (
            counters.connections_established,
            counters.calls_received,
            counters.refused_frames,
        );
        let wanted = (
            expected.connections_established,
            expected.calls_received,
            expected.refused_frames,
        );
        assert_eq!(found, wanted, "seed {seed:#x} case {case}: {counters:#?}");
    }
    assert!(
        expected.refused_frames > 0 && expected.calls_received > 0,
        "seed {seed:#x}: the inputs must exercise both refusals and requests: {expected:#?}"
    );
    assert!(
        expected.refused_frames < CASES as u64,
        "seed {seed:#x}: some inputs must end cleanly: {expected:#?}"
    );
    still_serves(&server, &certs).await;
    stops_with_nothing_open(server).await;
}
