//! Peers that must not get in, and peers that get in and then misbehave:
//! certificates from another CA (either side), a certificate that names
//! another node than the hello claims, a client reaching the wrong node,
//! plaintext and garbage instead of TLS, garbage and an oversized length
//! instead of frames, a hello from another cluster or version. Each is
//! refused, counted, logged with the peer's address (server side), and
//! closed, while the server goes on serving honest clients.
//!
//! Must not: read a counter before the socket it concerns is closed (the
//! server counts first, then closes).

use crate::harness::{
    CALL, CLUSTER, Logs, Server, client, cluster, echo, echoed, exchange_hellos, guard, hello,
    limits, misbehave, read_until_closed, read_until_socket_closed, tls, tls_session,
};
use iggyd_peer::frame::{Frame, FrameKind};
use iggyd_peer::{PeerError, PeerLimits};
use iggyd_testkit::rng::Rng;
use iggyd_testkit::tls::Issued;
use std::io::Write;
use std::time::Duration;

crate::on_both_drivers!(
    a_client_certificate_from_another_ca_is_refused_and_others_are_served,
    a_server_certificate_from_another_ca_is_refused,
    a_certificate_naming_node_2_cannot_claim_node_3,
    a_client_reaching_the_wrong_node_is_refused,
    plaintext_and_garbage_are_refused_and_others_are_served,
    garbage_frames_after_the_hello_are_refused,
    an_oversized_length_prefix_is_refused_at_once,
    a_hello_from_another_cluster_or_version_is_refused,
    a_connection_that_sends_nothing_is_a_probe_not_a_refusal,
);

// Proves a connection closed before sending a byte (what `iggyd cluster
// status` does to see that a node's port accepts) is no refusal: no
// refusal counted, no warn line (one debug line), while a connection that
// sends one byte of garbage is still refused and counted, and an honest
// client is served.
async fn a_connection_that_sends_nothing_is_a_probe_not_a_refusal() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    let logs = Logs::capture();
    misbehave(server.address, |mut stream| {
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        read_until_closed(&mut stream)
    })
    .await;
    for _ in 0..100 {
        if !logs.at("probe").is_empty() {
            break;
        }
        monoio::time::sleep(Duration::from_millis(10)).await;
    }
    let counters = server.counters.snapshot();
    assert_eq!(
        (
            counters.refused_tls,
            counters.refused_hello,
            counters.connections_established
        ),
        (0, 0, 0)
    );
    assert!(logs.at("WARN").is_empty(), "{:#?}", logs.at("WARN"));
    assert_eq!(logs.at("probe").len(), 1, "{:#?}", logs.at("DEBUG"));
    misbehave(server.address, |mut stream| {
        stream.write_all(&[0x42]).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        read_until_closed(&mut stream)
    })
    .await;
    assert_eq!(server.counters.snapshot().refused_tls, 1);
    assert_eq!(logs.at("WARN").len(), 1, "{:#?}", logs.at("WARN"));
    still_serves(&server, &certs).await;
    server.stop().await;
}

/// Proves an honest client still gets its answer from `server`.
async fn still_serves(server: &Server, certs: &iggyd_peer::ClusterCerts) {
    let (honest, _) = client(&tls(certs, 1), 2, server.address, limits());
    let reply = guard("an honest call", honest.call(5, b"still".to_vec(), CALL)).await;
    assert_eq!(reply.unwrap(), echoed(1, 5, b"still"));
}

// Proves a client whose certificate another CA issued (same cluster name,
// same node name) fails the TLS handshake at the server: counted as a TLS
// refusal, one warn line naming its address and the reason, the socket
// closed; an honest client is served afterwards.
async fn a_client_certificate_from_another_ca_is_refused_and_others_are_served() {
    let certs = cluster();
    let foreign = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    let logs = Logs::capture();
    // Trusts the cluster CA (so the server passes), presents a stranger.
    let config = iggyd_testkit::tls::client_config(
        &certs.ca_pem,
        Some(&Issued {
            cert_pem: foreign.nodes[&1].cert_pem.clone(),
            key_pem: foreign.nodes[&1].key_pem.clone(),
        }),
    );
    let local = misbehave(server.address, move |stream| {
        let local = stream.local_addr().unwrap();
        let mut session = tls_session(stream, config, 2);
        let _ = session.write_all(&hello(CLUSTER, 1, 2));
        let _ = session.flush();
        read_until_socket_closed(session);
        local
    })
    .await;
    let counters = server.counters.snapshot();
    assert_eq!(
        (counters.refused_tls, counters.connections_established),
        (1, 0)
    );
    let warnings = logs.at("WARN");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains(&format!("peer={local}")),
        "{warnings:#?}"
    );
    assert!(warnings[0].contains("TLS handshake"), "{warnings:#?}");
    still_serves(&server, &certs).await;
    server.stop().await;
}

// Proves a client refuses a server whose certificate another CA issued:
// the call fails as `Unreachable` with the certificate named in the
// reason, and nothing is sent.
async fn a_server_certificate_from_another_ca_is_refused() {
    let certs = cluster();
    let foreign = cluster();
    let server = Server::start(&tls(&foreign, 2), limits(), echo());
    let (client, counters) = client(&tls(&certs, 1), 2, server.address, limits());
    let refused = guard("a call to a stranger", client.call(1, b"x".to_vec(), CALL)).await;
    match refused.unwrap_err() {
        PeerError::Unreachable { node: 2, reason } => {
            assert!(reason.contains("certificate"), "{reason}");
        }
        other => panic!("expected Unreachable, got {other}"),
    }
    let counters = counters.snapshot();
    assert_eq!((counters.connect_failures, counters.calls_sent), (1, 0));
    server.stop().await;
}

// Proves the identity check: node 2's genuine certificate with a hello
// claiming node 3 is refused after TLS (counted as an identity refusal,
// one warn line naming the address and both nodes), and the same
// certificate with an honest hello is let in.
async fn a_certificate_naming_node_2_cannot_claim_node_3() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 1), limits(), echo());
    let logs = Logs::capture();
    let config = tls(&certs, 2).client_config();
    let local = misbehave(server.address, {
        let config = config.clone();
        move |stream| {
            let local = stream.local_addr().unwrap();
            let mut session = tls_session(stream, config, 1);
            session.write_all(&hello(CLUSTER, 3, 1)).unwrap();
            session.flush().unwrap();
            read_until_socket_closed(session);
            local
        }
    })
    .await;
    let counters = server.counters.snapshot();
    assert_eq!(
        (counters.refused_identity, counters.connections_established),
        (1, 0)
    );
    let warnings = logs.at("WARN");
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains(&format!("peer={local}")),
        "{warnings:#?}"
    );
    assert!(
        warnings[0].contains("its certificate names node 2, its hello claims node 3"),
        "{warnings:#?}"
    );
    let answer = misbehave(server.address, move |stream| {
        let mut session = tls_session(stream, config, 1);
        exchange_hellos(&mut session, &hello(CLUSTER, 2, 1))
    })
    .await;
    assert_eq!((answer.node_id, answer.target_node_id), (1, 2));
    server.stop().await;
}

// Proves a client cannot reach another node than it means to: a client
// for node 3 dialling node 2's address refuses node 2's certificate
// (`Unreachable`), and a hello that names node 3 as its target, sent to
// node 2, is refused by node 2 as an identity mismatch.
async fn a_client_reaching_the_wrong_node_is_refused() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    let (client, _) = client(&tls(&certs, 1), 3, server.address, limits());
    let refused = guard("a call to the wrong node", client.call(1, Vec::new(), CALL)).await;
    match refused.unwrap_err() {
        PeerError::Unreachable { node: 3, reason } => {
            assert!(reason.contains("certificate"), "{reason}");
        }
        other => panic!("expected Unreachable, got {other}"),
    }
    let config = tls(&certs, 1).client_config();
    misbehave(server.address, move |stream| {
        let mut session = tls_session(stream, config, 2);
        session.write_all(&hello(CLUSTER, 1, 3)).unwrap();
        session.flush().unwrap();
        read_until_socket_closed(session);
    })
    .await;
    assert_eq!(server.counters.snapshot().refused_identity, 1);
    still_serves(&server, &certs).await;
    server.stop().await;
}

// Proves a plaintext client (a hello without TLS) and seeded random
// garbage are refused at the TLS handshake and closed, each counted,
// and that the server goes on serving.
async fn plaintext_and_garbage_are_refused_and_others_are_served() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    misbehave(server.address, |mut stream| {
        stream.write_all(&hello(CLUSTER, 1, 2)).unwrap();
        read_until_closed(&mut stream);
    })
    .await;
    let garbage = Rng(0x6A2B_A6E0).bytes(4096);
    misbehave(server.address, move |mut stream| {
        // The server may close before it took everything.
        let _ = stream.write_all(&garbage);
        read_until_closed(&mut stream);
    })
    .await;
    let counters = server.counters.snapshot();
    assert_eq!(
        (counters.refused_tls, counters.connections_accepted),
        (2, 2)
    );
    still_serves(&server, &certs).await;
    server.stop().await;
}

/// Opens an honest session to node 2 as node 1 and hands it to `then`.
async fn after_the_hello(server: &Server, certs: &iggyd_peer::ClusterCerts, bytes: Vec<u8>) {
    let config = tls(certs, 1).client_config();
    misbehave(server.address, move |stream| {
        let mut session = tls_session(stream, config, 2);
        exchange_hellos(&mut session, &hello(CLUSTER, 1, 2));
        let _ = session.write_all(&bytes);
        let _ = session.flush();
        read_until_socket_closed(session);
    })
    .await;
}

// Proves bytes that are no frame, after an honest setup, end that
// connection only: an unknown kind, nonzero flags, a frame kind clients
// never send (a response), and seeded random bytes whose first header is
// made invalid. Each is counted as refused frames; the server goes on.
async fn garbage_frames_after_the_hello_are_refused() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    let request = Frame {
        kind: FrameKind::Request,
        call_id: 1,
        channel: 1,
        body: b"x".to_vec(),
    };
    let mut unknown_kind = request.to_bytes();
    unknown_kind[4] = 0xEE;
    let mut flags = request.to_bytes();
    flags[5] = 1;
    let response = Frame {
        kind: FrameKind::Response,
        ..request.clone()
    }
    .to_bytes();
    let mut random = Rng(0x6A2B_A6E1).bytes(1000);
    random[4] = 0;
    for bytes in [unknown_kind, flags, response, random] {
        after_the_hello(&server, &certs, bytes).await;
    }
    let counters = server.counters.snapshot();
    assert_eq!(
        (counters.refused_frames, counters.connections_established),
        (4, 4)
    );
    still_serves(&server, &certs).await;
    server.stop().await;
}

// Proves a length prefix of 4 GiB is refused from the header alone: the
// server closes at once although its stall timeout (60 s) is longer than
// the test's guard, so it neither waited for nor allocated the body.
async fn an_oversized_length_prefix_is_refused_at_once() {
    let certs = cluster();
    let patient = PeerLimits {
        stall_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(120),
        ..limits()
    };
    let server = Server::start(&tls(&certs, 2), patient, echo());
    let mut header = Frame {
        kind: FrameKind::Request,
        call_id: 1,
        channel: 1,
        body: Vec::new(),
    }
    .header()
    .to_vec();
    header[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    after_the_hello(&server, &certs, header).await;
    let counters = server.counters.snapshot();
    assert_eq!((counters.refused_frames, counters.calls_received), (1, 0));
    server.stop().await;
}

// Proves the hello's checks: a genuine certificate with a hello from
// another cluster, and a hello of another protocol version, are refused
// and counted as hello refusals.
async fn a_hello_from_another_cluster_or_version_is_refused() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    let mut version_two = hello(CLUSTER, 1, 2);
    version_two[4..6].copy_from_slice(&2u16.to_le_bytes());
    for bytes in [hello("other", 1, 2), version_two] {
        let config = tls(&certs, 1).client_config();
        misbehave(server.address, move |stream| {
            let mut session = tls_session(stream, config, 2);
            session.write_all(&bytes).unwrap();
            session.flush().unwrap();
            read_until_socket_closed(session);
        })
        .await;
    }
    let counters = server.counters.snapshot();
    assert_eq!(
        (counters.refused_hello, counters.connections_established),
        (2, 0)
    );
    still_serves(&server, &certs).await;
    server.stop().await;
}
