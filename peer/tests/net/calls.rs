//! Calls that succeed or fail as calls: a round trip, a thousand at once
//! on one connection answered out of order, 5 MiB bodies both ways,
//! failures and size limits, a timeout whose late answer is discarded,
//! and the in-flight bound holding a server back from reading and a
//! client back from sending.
//!
//! Must not: let a negative check (nothing happens) wait longer than a
//! short window.

use crate::harness::{CALL, Server, client, cluster, echo, echoed, guard, handler, limits, tls};
use iggyd_peer::error::CODE_REPLY_TOO_LARGE;
use iggyd_peer::{PeerError, PeerFailure, PeerLimits, PeerRequest};
use iggyd_testkit::rng::Rng;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

crate::on_both_drivers!(
    a_call_round_trips,
    a_thousand_concurrent_calls_finish_out_of_order_on_one_connection,
    large_bodies_arrive_intact,
    failures_and_oversized_bodies_reach_the_caller,
    a_timed_out_call_fails_and_its_late_answer_is_discarded,
    the_in_flight_bound_stops_the_server_reading,
    the_in_flight_bound_holds_a_clients_calls_back,
);

// Proves a call reaches the handler with the caller's node, shard and
// channel and the reply comes back; an empty body too; and that both
// sides count one connection and two calls.
async fn a_call_round_trips() {
    let certs = cluster();
    let server = Server::start(&tls(&certs, 2), limits(), echo());
    let (client, counters) = client(&tls(&certs, 1), 2, server.address, limits());
    let reply = guard("a call", client.call(42, b"hello".to_vec(), CALL)).await;
    assert_eq!(reply.unwrap(), echoed(1, 42, b"hello"));
    let reply = guard("an empty call", client.call(7, Vec::new(), CALL)).await;
    assert_eq!(reply.unwrap(), echoed(1, 7, b""));
    assert!(client.is_connected());
    let sent = counters.snapshot();
    assert_eq!(
        (sent.connect_attempts, sent.connections_established),
        (1, 1)
    );
    assert_eq!((sent.calls_sent, sent.connections_open), (2, 1));
    assert!(sent.bytes_in > 0 && sent.bytes_out > 0);
    let received = server.counters.snapshot();
    assert_eq!(
        (
            received.connections_accepted,
            received.connections_established,
            received.calls_received
        ),
        (1, 1, 2)
    );
    server.stop().await;
}

// Proves multiplexing: 1,000 calls are in flight at once on one
// connection (every handler has started before any is released), the
// handlers are released in a seeded random order, and every caller gets
// its own reply, the calls finishing out of the order they were made.
async fn a_thousand_concurrent_calls_finish_out_of_order_on_one_connection() {
    const CALLS: usize = 1_000;
    let certs = cluster();
    let (started, starts) = flume::unbounded::<(usize, flume::Sender<()>)>();
    let held = handler(move |request: PeerRequest| {
        let started = started.clone();
        async move {
            let index = usize::from_le_bytes(request.body[..8].try_into().unwrap());
            let (release, released) = flume::bounded(1);
            started.send((index, release)).unwrap();
            released.recv_async().await.unwrap();
            let mut reply = request.body;
            reply.reverse();
            Ok(reply)
        }
    });
    let server = Server::start(&tls(&certs, 2), limits(), held);
    let (client, _) = client(&tls(&certs, 1), 2, server.address, limits());
    let body = |index: usize| {
        let mut body = index.to_le_bytes().to_vec();
        body.extend(std::iter::repeat_n(index as u8, index % 300));
        body
    };
    let finished = Rc::new(RefCell::new(Vec::new()));
    let calls: Vec<_> = (0..CALLS)
        .map(|index| {
            let client = client.clone();
            let finished = finished.clone();
            let body = body(index);
            monoio::spawn(async move {
                let reply = client.call(index as u64 % 7, body, CALL).await;
                finished.borrow_mut().push(index);
                reply
            })
        })
        .collect();
    let mut releases = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        releases.push(
            guard("every handler starts", starts.recv_async())
                .await
                .unwrap(),
        );
    }
    let seed = 0x1000_CA11;
    let mut rng = Rng(seed);
    for at in (1..releases.len()).rev() {
        releases.swap(at, rng.index(at + 1));
    }
    for (_, release) in releases {
        release.send(()).unwrap();
    }
    for (index, call) in calls.into_iter().enumerate() {
        let mut expected = body(index);
        expected.reverse();
        assert_eq!(
            guard("a call", call).await.unwrap(),
            expected,
            "call {index}"
        );
    }
    let finished = finished.borrow().clone();
    assert_ne!(finished, (0..CALLS).collect::<Vec<_>>(), "seed {seed:#x}");
    let mut sorted = finished.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..CALLS).collect::<Vec<_>>());
    let counters = server.counters.snapshot();
    assert_eq!(counters.connections_accepted, 1);
    assert_eq!(counters.calls_received, CALLS as u64);
    server.stop().await;
}

/// FNV-1a, 64 bits: a checksum the test computes on both sides.
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

// Proves large bodies cross intact both ways: 5 MiB and 12,345 bytes (five
// of the decoder's growth steps, hundreds of TLS records, several socket
// flushes, a multiple of none of them). The handler checks what it
// received against the checksum in the request and answers as many bytes
// of its own, compared byte for byte; a small call on the same connection
// is answered too.
async fn large_bodies_arrive_intact() {
    const BYTES: usize = (5 << 20) + 12_345;
    let certs = cluster();
    let transform = |bytes: &[u8]| bytes.iter().map(|byte| byte ^ 0xA5).collect::<Vec<u8>>();
    let large = handler(move |request: PeerRequest| async move {
        if request.channel == 0 {
            return Ok(b"small".to_vec());
        }
        let (sum, data) = request.body.split_at(8);
        assert_eq!(
            u64::from_le_bytes(sum.try_into().unwrap()),
            checksum(data),
            "the request's bytes changed on the way"
        );
        Ok(transform(data))
    });
    let server = Server::start(&tls(&certs, 2), limits(), large);
    let (client, _) = client(&tls(&certs, 1), 2, server.address, limits());
    let mut rng = Rng(0x0B16_B0D1);
    let data = rng.bytes(BYTES);
    let mut body = checksum(&data).to_le_bytes().to_vec();
    body.extend_from_slice(&data);
    let big_call = monoio::spawn({
        let client = client.clone();
        async move { client.call(1, body, CALL).await }
    });
    let small = guard("a small call", client.call(0, Vec::new(), CALL)).await;
    assert_eq!(small.unwrap(), b"small");
    let reply = guard("a large call", big_call).await.unwrap();
    assert_eq!(reply.len(), BYTES);
    assert_eq!(checksum(&reply), checksum(&transform(&data)));
    assert!(reply == transform(&data), "the reply's bytes changed");
    server.stop().await;
}

// Proves what a caller sees for each failure: the handler's own failure
// with its code and message, a reply too large for a frame (code
// 0xFF01), and a request too large for a frame (refused before sending:
// nothing is written).
async fn failures_and_oversized_bodies_reach_the_caller() {
    let certs = cluster();
    let small = PeerLimits {
        frame_bytes_max: 8 << 10,
        call_bytes_in_flight_max: 8 << 10,
        ..limits()
    };
    let failing = handler(|request: PeerRequest| async move {
        match request.channel {
            1 => Err(PeerFailure {
                code: 7,
                message: "not the leader".to_string(),
            }),
            _ => Ok(vec![0; 9 << 10]),
        }
    });
    let server = Server::start(&tls(&certs, 2), small, failing);
    let (client, counters) = client(&tls(&certs, 1), 2, server.address, small);
    let failed = guard("a failing call", client.call(1, Vec::new(), CALL)).await;
    assert_eq!(
        failed.unwrap_err(),
        PeerError::Failed {
            node: 2,
            failure: PeerFailure {
                code: 7,
                message: "not the leader".to_string()
            }
        }
    );
    let too_large = guard("a call with a huge reply", client.call(2, Vec::new(), CALL)).await;
    match too_large.unwrap_err() {
        PeerError::Failed { failure, .. } => {
            assert_eq!(failure.code, CODE_REPLY_TOO_LARGE);
            assert!(failure.message.contains("9216 bytes"), "{failure}");
        }
        other => panic!("expected a failure, got {other}"),
    }
    let request = client.call(3, vec![0; 8 << 10], CALL).await;
    assert_eq!(
        request.unwrap_err(),
        PeerError::TooLarge {
            bytes: 8 << 10,
            max: (8 << 10) - 24
        }
    );
    let counters = counters.snapshot();
    assert_eq!((counters.calls_sent, counters.calls_failed), (2, 2));
    assert_eq!(server.counters.snapshot().calls_failed, 2);
    server.stop().await;
}

// Proves a call that outlives its timeout fails with `TimedOut` while its
// handler still runs, and that the answer the handler gives afterwards is
// discarded (counted) without disturbing the next call on the connection.
async fn a_timed_out_call_fails_and_its_late_answer_is_discarded() {
    let certs = cluster();
    let (started, starts) = flume::unbounded::<()>();
    let (finished, finishes) = flume::unbounded::<()>();
    let (gate, gate_opens) = flume::unbounded::<()>();
    let slow = handler(move |request: PeerRequest| {
        let (started, finished, gate_opens) =
            (started.clone(), finished.clone(), gate_opens.clone());
        async move {
            if request.channel == 1 {
                started.send(()).unwrap();
                gate_opens.recv_async().await.unwrap();
                finished.send(()).unwrap();
            }
            Ok(request.body)
        }
    });
    let server = Server::start(&tls(&certs, 2), limits(), slow);
    let (client, counters) = client(&tls(&certs, 1), 2, server.address, limits());
    // Connected first, so the slow call's request is surely written before
    // its timeout (a request whose caller gave up is never sent).
    let warm = guard("a first call", client.call(0, b"warm".to_vec(), CALL)).await;
    assert_eq!(warm.unwrap(), b"warm");
    let timeout = Duration::from_millis(500);
    let late = guard("a slow call", client.call(1, b"late".to_vec(), timeout)).await;
    assert_eq!(late.unwrap_err(), PeerError::TimedOut { node: 2, timeout });
    guard("the slow handler started", starts.recv_async())
        .await
        .unwrap();
    gate.send(()).unwrap();
    guard("the slow handler finished", finishes.recv_async())
        .await
        .unwrap();
    // The late answer was queued before this call reached the server, so
    // it arrives first.
    let next = guard("the next call", client.call(0, b"next".to_vec(), CALL)).await;
    assert_eq!(next.unwrap(), b"next");
    let counters = counters.snapshot();
    assert_eq!(counters.calls_timed_out, 1);
    assert_eq!(counters.responses_discarded, 1);
    assert_eq!(counters.connections_established, 1);
    server.stop().await;
}

// Proves backpressure: with `calls_in_flight_max` = 4 and ten calls sent
// at once to handlers that block, four handlers start, the server reads
// no fifth request while they block (none starts, none is counted as
// received, within a 300 ms window), and as handlers are released the
// rest run, all ten answered.
async fn the_in_flight_bound_stops_the_server_reading() {
    const CALLS: usize = 10;
    let certs = cluster();
    let bounded = PeerLimits {
        calls_in_flight_max: 4,
        ..limits()
    };
    let (started, starts) = flume::unbounded::<()>();
    let (gate, gate_opens) = flume::unbounded::<()>();
    let blocking = handler(move |request: PeerRequest| {
        let (started, gate_opens) = (started.clone(), gate_opens.clone());
        async move {
            started.send(()).unwrap();
            gate_opens.recv_async().await.unwrap();
            Ok(request.body)
        }
    });
    let server = Server::start(&tls(&certs, 2), bounded, blocking);
    let (client, _) = client(&tls(&certs, 1), 2, server.address, limits());
    let calls: Vec<_> = (0..CALLS)
        .map(|index| {
            let client = client.clone();
            monoio::spawn(async move { client.call(1, vec![index as u8], CALL).await })
        })
        .collect();
    for _ in 0..4 {
        guard("a handler starts", starts.recv_async())
            .await
            .unwrap();
    }
    let fifth = monoio::time::timeout(Duration::from_millis(300), starts.recv_async()).await;
    assert!(fifth.is_err(), "a fifth handler started past the bound");
    assert_eq!(server.counters.snapshot().calls_received, 4);
    for _ in 0..CALLS {
        gate.send(()).unwrap();
    }
    for (index, call) in calls.into_iter().enumerate() {
        assert_eq!(guard("a call", call).await.unwrap(), vec![index as u8]);
    }
    assert_eq!(server.counters.snapshot().calls_received, CALLS as u64);
    server.stop().await;
}

// Proves the client's side of the bound: with `calls_in_flight_max` = 2
// on the client, two calls to handlers that block are sent and a third
// waits for room without being sent, until its timeout fails it (the
// client wrote two requests, the server read two, no third handler
// started); released, the two are answered, and the room they held is
// free for the next call.
async fn the_in_flight_bound_holds_a_clients_calls_back() {
    let certs = cluster();
    let (started, starts) = flume::unbounded::<()>();
    let (gate, gate_opens) = flume::unbounded::<()>();
    let blocking = handler(move |request: PeerRequest| {
        let (started, gate_opens) = (started.clone(), gate_opens.clone());
        async move {
            if request.channel == 1 {
                started.send(()).unwrap();
                gate_opens.recv_async().await.unwrap();
            }
            Ok(request.body)
        }
    });
    let server = Server::start(&tls(&certs, 2), limits(), blocking);
    let two = PeerLimits {
        calls_in_flight_max: 2,
        ..limits()
    };
    let (client, counters) = client(&tls(&certs, 1), 2, server.address, two);
    let held: Vec<_> = (0..2u8)
        .map(|index| {
            let client = client.clone();
            monoio::spawn(async move { client.call(1, vec![index], CALL).await })
        })
        .collect();
    for _ in 0..2 {
        guard("a handler starts", starts.recv_async())
            .await
            .unwrap();
    }
    let timeout = Duration::from_millis(300);
    let third = guard("a third call", client.call(1, vec![2], timeout)).await;
    assert_eq!(third.unwrap_err(), PeerError::TimedOut { node: 2, timeout });
    assert!(starts.is_empty(), "a third handler started past the bound");
    assert_eq!(counters.snapshot().calls_sent, 2);
    assert_eq!(server.counters.snapshot().calls_received, 2);
    gate.send(()).unwrap();
    gate.send(()).unwrap();
    for (index, call) in held.into_iter().enumerate() {
        assert_eq!(guard("a held call", call).await.unwrap(), vec![index as u8]);
    }
    let next = guard(
        "a call after the others",
        client.call(0, b"n".to_vec(), CALL),
    )
    .await;
    assert_eq!(next.unwrap(), b"n");
    assert_eq!(counters.snapshot().calls_sent, 3);
    server.stop().await;
}
