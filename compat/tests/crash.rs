//! Crash test with the official SDK: a producer task sends batches to a
//! `persisted` topic (the SDK puts `durability = persisted` in CreateTopic's
//! options), the daemon is SIGKILLed at a random moment (a seeded number of
//! acknowledged batches into each round, while a send is usually in flight),
//! then restarted on the same data directory. After every restart, every
//! acknowledged message must read back at the offset its acknowledgement
//! named, with identical bytes; offsets must be dense (no holes) and no
//! acknowledged message may appear twice. The batch in flight at the kill was
//! never acknowledged: it may be present or absent, but only whole.
//!
//! The seed is printed; `IGGYD_CRASH_SEED=<n>` replays a run.

#[path = "common/mod.rs"]
mod common;

use common::*;
use iggy::prelude::*;
use iggyd_testkit::rng::Rng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROUNDS: usize = 6;
const PARTITIONS: u32 = 2;

/// The bytes of message `sequence`: its number, then 16..2064 bytes that
/// depend only on the number (so the verifier can rebuild them).
fn payload(sequence: u64) -> Vec<u8> {
    let mut rng = Rng(sequence ^ 0xC0FF_EE00);
    let length = 16 + rng.below(2048) as usize;
    let mut bytes = sequence.to_le_bytes().to_vec();
    bytes.extend((0..length).map(|_| rng.next_u64() as u8));
    bytes
}

fn sequence_of(payload: &[u8]) -> u64 {
    u64::from_le_bytes(payload[..8].try_into().expect("8-byte sequence prefix"))
}

/// What the producer knows: acknowledged messages by (partition, offset), and
/// the batch that was in flight when the daemon died.
#[derive(Default)]
struct Ledger {
    acked: BTreeMap<(u32, u64), u64>,
    acked_batches: usize,
    in_flight: Option<(u32, Vec<u64>)>,
}

async fn producer_client(daemon: &SdkDaemon) -> IggyClient {
    // No reconnection: once the daemon is gone, the send fails instead of
    // being replayed against the restarted daemon.
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(daemon.address.to_string())
        .with_reconnection_max_retries(Some(0))
        .build()
        .expect("client");
    client.connect().await.expect("connect");
    client
        .login_user(ROOT_USERNAME, ROOT_PASSWORD)
        .await
        .expect("login");
    client
}

/// Send batches until a send fails (the daemon was killed).
async fn produce(
    client: IggyClient,
    ledger: Arc<Mutex<Ledger>>,
    mut rng: Rng,
    mut next_sequence: u64,
) -> u64 {
    loop {
        let partition = rng.below(u64::from(PARTITIONS)) as u32;
        let count = 1 + rng.below(16);
        let sequences: Vec<u64> = (next_sequence..next_sequence + count).collect();
        next_sequence += count;
        let mut batch: Vec<IggyMessage> = sequences
            .iter()
            .map(|&sequence| IggyMessage::from(payload(sequence)))
            .collect();
        ledger.lock().unwrap().in_flight = Some((partition, sequences.clone()));
        let sent = client
            .send_messages(
                &named("crash"),
                &named("t"),
                &Partitioning::partition_id(partition),
                &mut batch,
            )
            .await;
        let mut ledger = ledger.lock().unwrap();
        match sent {
            Ok(response) => {
                let confirmation = response
                    .confirmations
                    .first()
                    .expect("iggyd confirms every batch with its base offset");
                assert_eq!(confirmation.partition_id, partition);
                for (index, &sequence) in sequences.iter().enumerate() {
                    let key = (partition, confirmation.base_offset + index as u64);
                    assert!(
                        ledger.acked.insert(key, sequence).is_none(),
                        "offset {key:?} acknowledged twice"
                    );
                }
                ledger.acked_batches += 1;
                ledger.in_flight = None;
            }
            Err(_) => return next_sequence,
        }
    }
}

/// Read a whole partition from offset 0.
async fn read_partition(client: &IggyClient, partition: u32) -> Vec<IggyMessage> {
    let consumer = Consumer::new(named("verifier"));
    let mut messages: Vec<IggyMessage> = Vec::new();
    loop {
        let polled = client
            .poll_messages(
                &named("crash"),
                &named("t"),
                Some(partition),
                &consumer,
                &PollingStrategy::offset(messages.len() as u64),
                1000,
                false,
            )
            .await
            .expect("poll after restart");
        if polled.messages.is_empty() {
            return messages;
        }
        messages.extend(polled.messages);
    }
}

/// Check the restarted daemon against the ledger; returns how many
/// acknowledged messages were verified.
async fn verify(daemon: &SdkDaemon, ledger: &Ledger, seed: u64, round: usize) -> usize {
    let context = format!("seed {seed}, round {round}");
    let client = daemon.root_client().await;
    let mut verified = 0;
    for partition in 0..PARTITIONS {
        let messages = read_partition(&client, partition).await;
        let mut seen = BTreeMap::new();
        for (index, message) in messages.iter().enumerate() {
            assert_eq!(
                message.header.offset, index as u64,
                "{context}: partition {partition} has a hole or reordering at {index}"
            );
            let sequence = sequence_of(&message.payload);
            assert_eq!(
                message.payload.as_ref(),
                payload(sequence).as_slice(),
                "{context}: partition {partition} offset {index}: bytes differ"
            );
            if let Some(earlier) = seen.insert(sequence, index) {
                let acked = ledger.acked.values().any(|&acked| acked == sequence);
                assert!(
                    !acked,
                    "{context}: acknowledged message {sequence} at offsets {earlier} and {index}"
                );
            }
        }
        for (&(acked_partition, offset), &sequence) in &ledger.acked {
            if acked_partition != partition {
                continue;
            }
            let message = messages.get(offset as usize).unwrap_or_else(|| {
                panic!(
                    "{context}: acknowledged message {sequence} at {partition}/{offset} is \
                     missing; the partition has {} messages",
                    messages.len()
                )
            });
            assert_eq!(
                sequence_of(&message.payload),
                sequence,
                "{context}: {partition}/{offset} holds another message than was acknowledged"
            );
            verified += 1;
        }
        if let Some((in_flight_partition, sequences)) = &ledger.in_flight
            && *in_flight_partition == partition
        {
            let present = sequences
                .iter()
                .filter(|sequence| seen.contains_key(sequence))
                .count();
            assert!(
                present == 0 || present == sequences.len(),
                "{context}: the unacknowledged batch is half visible ({present} of {})",
                sequences.len()
            );
        }
    }
    client.shutdown().await.ok();
    verified
}

/// Proves acknowledged data survives SIGKILL on a `persisted` topic, with
/// dense offsets and no duplicates, across several kill/restart rounds driven
/// by the official SDK. See the module doc.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_messages_survive_kill_9() {
    let seed = std::env::var("IGGYD_CRASH_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("crash test seed: {seed} (IGGYD_CRASH_SEED={seed} replays it)");
    let started = Instant::now();
    let mut rng = Rng(seed);
    let mut daemon = SdkDaemon::start();
    {
        let admin = daemon.root_client().await;
        admin.create_stream("crash").await.expect("stream");
        let options = TopicCreateOptions {
            durability: Durability::Persisted,
            consumer_offset_durability: Durability::Persisted,
            ..topic_options(PARTITIONS)
        };
        admin
            .create_topic(&named("crash"), "t", &options)
            .await
            .expect("persisted topic");
        admin.shutdown().await.ok();
    }

    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut next_sequence = 0;
    let mut verified = 0;
    for round in 0..ROUNDS {
        let client = producer_client(&daemon).await;
        let target = ledger.lock().unwrap().acked_batches + 5 + rng.below(40) as usize;
        let producer = tokio::spawn(produce(
            client,
            ledger.clone(),
            Rng(rng.next_u64()),
            next_sequence,
        ));
        eventually(
            Duration::from_secs(30),
            "the producer's acknowledgements",
            || {
                let ledger = ledger.clone();
                async move { ledger.lock().unwrap().acked_batches >= target }
            },
        )
        .await;
        daemon.kill();
        next_sequence = tokio::time::timeout(Duration::from_secs(30), producer)
            .await
            .expect("the producer notices the dead daemon")
            .expect("producer task");
        daemon.restart();
        let snapshot = {
            let ledger = ledger.lock().unwrap();
            Ledger {
                acked: ledger.acked.clone(),
                acked_batches: ledger.acked_batches,
                in_flight: ledger.in_flight.clone(),
            }
        };
        verified = verify(&daemon, &snapshot, seed, round).await;
        ledger.lock().unwrap().in_flight = None;
    }
    println!(
        "crash test: {ROUNDS} kill -9 rounds, {verified} acknowledged messages verified, {:?}",
        started.elapsed()
    );
    assert!(verified > 0);
    daemon.assert_clean_log();
}
