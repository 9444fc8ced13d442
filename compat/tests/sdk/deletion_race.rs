//! The delete/create race with the official SDK: two clients loop
//! `DeleteTopic` / `CreateTopic` of one name (8 partitions, `persisted`)
//! while a third sends `persisted` messages to that name, then the daemon
//! is killed (`kill -9`) and restarted.
//!
//! The duration is `IGGYD_DELETE_RACE_SECS` seconds when set, else 60 (CI
//! included: the whole suite stays far under its 30 minutes).

use crate::common::*;
use iggy::prelude::*;
use iggyd_testkit::rng::Rng;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const PARTITIONS: u32 = 8;

fn race_duration() -> Duration {
    let seconds = std::env::var("IGGYD_DELETE_RACE_SECS")
        .ok()
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or(60);
    Duration::from_secs(seconds)
}

/// The bytes of message `sequence`: its number, then 8..520 bytes that
/// depend only on the number (so the verifier can rebuild them).
fn payload(sequence: u64) -> Vec<u8> {
    let mut rng = Rng(sequence ^ 0xDE1E_7E00);
    let length = 8 + rng.below(512) as usize;
    let mut bytes = sequence.to_le_bytes().to_vec();
    bytes.extend((0..length).map(|_| rng.next_u64() as u8));
    bytes
}

fn sequence_of(payload: &[u8]) -> u64 {
    u64::from_le_bytes(payload[..8].try_into().expect("8-byte sequence prefix"))
}

fn persisted_topic() -> TopicCreateOptions {
    TopicCreateOptions {
        durability: Durability::Persisted,
        consumer_offset_durability: Durability::Persisted,
        ..topic_options(PARTITIONS)
    }
}

/// A successful `CreateTopic`: when its request went out and when its
/// acknowledgement came back.
#[derive(Debug, Clone, Copy)]
struct Created {
    sent: Instant,
    acked: Instant,
}

/// One acknowledged send.
#[derive(Debug, Clone)]
struct Acked {
    sent: Instant,
    acked: Instant,
    partition: u32,
    base_offset: u64,
    sequences: Vec<u64>,
}

#[derive(Default)]
struct Ledger {
    acked: Vec<Acked>,
}

/// Loops delete + create of `race/t` until `stop`; returns its successful
/// creates and the time of its last successful delete.
async fn churn(daemon_address: String, stop: Arc<AtomicBool>) -> (Vec<Created>, Option<Instant>) {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(daemon_address)
        .build()
        .expect("client");
    client.connect().await.expect("connect");
    client
        .login_user(ROOT_USERNAME, ROOT_PASSWORD)
        .await
        .expect("login");
    let mut created = Vec::new();
    let mut last_delete = None;
    while !stop.load(Ordering::Relaxed) {
        if client
            .delete_topic(&named("race"), &named("t"))
            .await
            .is_ok()
        {
            last_delete = Some(Instant::now());
        }
        let sent = Instant::now();
        if client
            .create_topic(&named("race"), "t", &persisted_topic())
            .await
            .is_ok()
        {
            created.push(Created {
                sent,
                acked: Instant::now(),
            });
        }
    }
    client.shutdown().await.ok();
    (created, last_delete)
}

/// Sends batches of 1..4 messages to rotating partitions of `race/t` until
/// a send fails after `killed` was set.
async fn produce(
    daemon_address: String,
    ledger: Arc<Mutex<Ledger>>,
    killed: Arc<AtomicBool>,
    mut rng: Rng,
) {
    let client = IggyClient::builder()
        .with_tcp()
        .with_server_address(daemon_address)
        .with_reconnection_max_retries(Some(0))
        .build()
        .expect("client");
    client.connect().await.expect("connect");
    client
        .login_user(ROOT_USERNAME, ROOT_PASSWORD)
        .await
        .expect("login");
    let mut next_sequence = 0u64;
    loop {
        let partition = rng.below(u64::from(PARTITIONS)) as u32;
        let count = 1 + rng.below(4);
        let sequences: Vec<u64> = (next_sequence..next_sequence + count).collect();
        next_sequence += count;
        let mut batch: Vec<IggyMessage> = sequences
            .iter()
            .map(|&sequence| IggyMessage::from(payload(sequence)))
            .collect();
        let sent = Instant::now();
        let result = client
            .send_messages(
                &named("race"),
                &named("t"),
                &Partitioning::partition_id(partition),
                &mut batch,
            )
            .await;
        match result {
            Ok(response) => {
                let confirmation = response
                    .confirmations
                    .first()
                    .expect("iggyd confirms every batch with its base offset");
                assert_eq!(confirmation.partition_id, partition);
                ledger.lock().unwrap().acked.push(Acked {
                    sent,
                    acked: Instant::now(),
                    partition,
                    base_offset: confirmation.base_offset,
                    sequences,
                });
            }
            // The topic is being deleted or created: try again.
            Err(_) if !killed.load(Ordering::Relaxed) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(_) => return,
        }
    }
}

/// Every message of one partition, from offset 0.
async fn read_partition(client: &IggyClient, partition: u32) -> Vec<IggyMessage> {
    let consumer = Consumer::new(named("verifier"));
    let mut messages: Vec<IggyMessage> = Vec::new();
    loop {
        let polled = client
            .poll_messages(
                &named("race"),
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

/// Proves a `DeleteTopic` racing a `CreateTopic` of the same name never puts
/// two partitions on one directory: after minutes of churn (two clients
/// deleting and creating an 8-partition `persisted` topic while a third
/// sends `persisted` messages to it), a `kill -9` and a restart, every
/// message whose send went out after the last topic's creation was
/// acknowledged is there at its acknowledged offset, byte for byte; and no
/// message acknowledged before that topic's creation was even requested
/// (so stored in a topic deleted since) is visible in it. The trash then
/// empties and only the topic's 8 partition directories remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delete_create_race_keeps_every_acknowledged_message() {
    let duration = race_duration();
    println!("delete/create race for {duration:?} (IGGYD_DELETE_RACE_SECS)");
    let mut daemon = SdkDaemon::start_with(&[("IGGYD_SHARDING__CPU_ALLOCATION", "all")]);
    let address = daemon.address.to_string();
    let admin = daemon.root_client().await;
    admin.create_stream("race").await.expect("stream");
    admin
        .create_topic(&named("race"), "t", &persisted_topic())
        .await
        .expect("topic");

    let stop = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let churners: Vec<_> = (0..2)
        .map(|_| tokio::spawn(churn(address.clone(), stop.clone())))
        .collect();
    let producer = tokio::spawn(produce(
        address.clone(),
        ledger.clone(),
        killed.clone(),
        Rng(0x5EED_0DE1),
    ));
    // The workload runs for its duration (not a wait for readiness).
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut creates = Vec::new();
    let mut last_delete: Option<Instant> = None;
    for churner in churners {
        let (created, deleted) = churner.await.expect("churner");
        creates.extend(created);
        last_delete = last_delete.max(deleted);
    }
    // The topic the race left behind (or a last one made now).
    if admin
        .get_topic(&named("race"), &named("t"))
        .await
        .unwrap()
        .is_none()
    {
        let sent = Instant::now();
        admin
            .create_topic(&named("race"), "t", &persisted_topic())
            .await
            .expect("final topic");
        creates.push(Created {
            sent,
            acked: Instant::now(),
        });
    }
    let last = *creates
        .iter()
        .max_by_key(|created| created.acked)
        .expect("at least one create");
    assert!(last_delete.is_none_or(|deleted| deleted < last.acked));
    println!(
        "{} creates and deletes raced; the last topic was created {:?} before the end",
        creates.len(),
        last.acked.elapsed()
    );
    // Sends made after the last create was acknowledged reach that topic
    // only; let some of them be acknowledged, then kill with sends in
    // flight.
    eventually(
        Duration::from_secs(60),
        "acknowledged sends to the last topic",
        || {
            let ledger = ledger.clone();
            async move {
                let ledger = ledger.lock().unwrap();
                ledger
                    .acked
                    .iter()
                    .filter(|acked| acked.sent > last.acked)
                    .count()
                    >= 20
            }
        },
    )
    .await;
    admin.shutdown().await.ok();
    killed.store(true, Ordering::Relaxed);
    daemon.kill();
    tokio::time::timeout(Duration::from_secs(30), producer)
        .await
        .expect("the producer notices the dead daemon")
        .expect("producer");

    daemon.restart();
    let client = daemon.root_client().await;
    let ledger = std::mem::take(&mut *ledger.lock().unwrap());
    let acked_at: BTreeMap<u64, Instant> = ledger
        .acked
        .iter()
        .flat_map(|acked| {
            acked
                .sequences
                .iter()
                .map(|sequence| (*sequence, acked.acked))
        })
        .collect();
    let mut verified = 0;
    let mut visible = 0;
    for partition in 0..PARTITIONS {
        let messages = read_partition(&client, partition).await;
        let mut seen = BTreeSet::new();
        for (index, message) in messages.iter().enumerate() {
            assert_eq!(message.header.offset, index as u64, "partition {partition}");
            let sequence = sequence_of(&message.payload);
            assert_eq!(
                message.payload.as_ref(),
                payload(sequence).as_slice(),
                "partition {partition} offset {index}: bytes differ"
            );
            assert!(seen.insert(sequence), "{sequence} twice in {partition}");
            // Acknowledged before this topic's create was even sent: it was
            // stored in a topic deleted since.
            assert!(
                acked_at
                    .get(&sequence)
                    .is_none_or(|acked| *acked > last.sent),
                "partition {partition} offset {index} holds message {sequence}, acknowledged \
                 before this topic's creation was requested: data of a deleted topic is visible"
            );
            visible += 1;
        }
        for acked in ledger
            .acked
            .iter()
            .filter(|acked| acked.partition == partition && acked.sent > last.acked)
        {
            for (index, sequence) in acked.sequences.iter().enumerate() {
                let offset = acked.base_offset + index as u64;
                let message = messages.get(offset as usize).unwrap_or_else(|| {
                    panic!(
                        "acknowledged message {sequence} at {partition}/{offset} is missing; \
                         the partition has {} messages",
                        messages.len()
                    )
                });
                assert_eq!(sequence_of(&message.payload), *sequence);
                verified += 1;
            }
        }
    }
    println!(
        "{verified} acknowledged messages verified, {visible} visible, {} sends acknowledged in all",
        ledger.acked.len()
    );
    assert!(verified >= 20);
    eventually(Duration::from_secs(60), "the trash is emptied", || async {
        daemon.admin_snapshot().process.pending_removal.entries == 0
            && daemon.data_entries("trash").is_empty()
    })
    .await;
    assert_eq!(daemon.data_entries("partitions").len(), PARTITIONS as usize);
    client.shutdown().await.ok();
    daemon.assert_clean_log();
}
