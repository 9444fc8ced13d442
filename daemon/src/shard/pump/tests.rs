//! Unit tests of the pump on the simulated disk: group commit, the
//! acknowledgement rules of `persisted` and `replicated`, offsets, purge,
//! retention and a failed fsync. The seeded simulation is `pump_sim/`.

use super::*;
use iggyd_storage::consumer_offsets::ConsumerKind;
use iggyd_storage::sim::{SimClock, SimIo, block_on};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch};
use iggyd_wire::protocol::codes::Status;
use std::path::Path;

const KEY: PartitionKey = PartitionKey {
    stream: 0,
    topic: 0,
    partition: 0,
    storage_id: 0,
};
const CONSUMER: ConsumerKey = ConsumerKey {
    kind: ConsumerKind::Consumer,
    id: 7,
};

fn storage() -> PumpStorage {
    PumpStorage {
        data_dir: PathBuf::from("/data"),
        access: Access::Direct,
        pool: BufferPool::new(1 << 20),
        trash: TrashStart::default(),
        consumer_offsets_max: 3,
        read_window_bytes: crate::limits::storage::READ_WINDOW_BYTES,
    }
}

fn batch(messages: usize) -> ValidBatch {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: index as u128 + 1,
            timestamp_delta: 0,
            payload: vec![b'x'; 100],
            user_headers: Vec::new(),
        })
        .collect();
    let bytes = encode_producer_batch(1_000, &specs);
    let len = bytes.len();
    ValidBatch::new(bytes, 0..len).unwrap()
}

fn pump(io: &SimIo, durability: Durability) -> Pump<SimIo> {
    let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(1_000_000)), storage());
    let settings = PartitionSettings {
        durability,
        ..PartitionSettings::default()
    };
    block_on(pump.open(KEY, settings)).unwrap();
    pump
}

fn channel<T>() -> (Reply<T>, flume::Receiver<Result<T, PumpError>>) {
    flume::bounded(1)
}

fn poll(pump: &mut Pump<SimIo>, strategy: PollingStrategy, auto_commit: bool) -> PollResult {
    let (reply, answer) = channel();
    let request = PollRequest {
        consumer: Some(CONSUMER),
        strategy,
        count: 100,
        auto_commit,
        bytes_max: u64::MAX,
    };
    block_on(async {
        pump.apply(PartitionOp::Poll {
            key: KEY,
            request,
            reply,
        })
        .await;
        pump.commit().await;
    });
    answer.try_recv().unwrap().unwrap()
}

// Proves group commit for `persisted`: appends are acknowledged only in
// the commit phase, several appends share one fsync, and a poll before
// the commit sees none of them (nothing a crash could take back).
#[test]
fn persisted_acks_wait_for_one_shared_fsync_and_reads_see_only_durable_data() {
    let io = SimIo::new(1);
    let mut pump = pump(&io, Durability::Persisted);
    let answers: Vec<_> = (0..3)
        .map(|_| {
            let (reply, answer) = channel();
            block_on(pump.apply(PartitionOp::Append {
                key: KEY,
                batch: batch(10),
                reply,
            }));
            answer
        })
        .collect();
    assert!(
        answers.iter().all(|answer| answer.try_recv().is_err()),
        "no ack before commit"
    );
    let (reply, early) = channel();
    let request = PollRequest {
        consumer: None,
        strategy: PollingStrategy::First,
        count: 100,
        auto_commit: false,
        bytes_max: u64::MAX,
    };
    block_on(pump.apply(PartitionOp::Poll {
        key: KEY,
        request,
        reply,
    }));
    assert_eq!(early.try_recv().unwrap().unwrap().message_count, 0);
    let fsyncs_before = pump.counters.fsyncs;
    block_on(pump.commit());
    assert_eq!(
        pump.counters.fsyncs - fsyncs_before,
        1,
        "one fsync for three appends"
    );
    let acks: Vec<AppendAck> = answers
        .iter()
        .map(|answer| answer.try_recv().unwrap().unwrap())
        .collect();
    assert_eq!(
        acks[0],
        AppendAck {
            base_offset: 0,
            last_offset: 9
        }
    );
    assert_eq!(
        acks[2],
        AppendAck {
            base_offset: 20,
            last_offset: 29
        }
    );
    // Acknowledged means durable: a crash right now loses nothing.
    io.crash();
    let mut reopened = pump_reopen(&io, Durability::Persisted);
    assert_eq!(
        poll(&mut reopened, PollingStrategy::First, false).message_count,
        30
    );
}

fn pump_reopen(io: &SimIo, durability: Durability) -> Pump<SimIo> {
    pump(io, durability)
}

// Proves `replicated` acknowledges once the commit phase wrote the
// batch (not before), and serves it from then on.
#[test]
fn replicated_acks_on_write() {
    let io = SimIo::new(2);
    let mut pump = pump(&io, Durability::Replicated);
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: KEY,
        batch: batch(5),
        reply,
    }));
    assert!(answer.try_recv().is_err(), "no ack before the write");
    assert_eq!(
        poll(&mut pump, PollingStrategy::First, false).message_count,
        0,
        "an unwritten batch is not visible"
    );
    block_on(pump.commit());
    assert_eq!(answer.try_recv().unwrap().unwrap().last_offset, 4);
    assert_eq!(
        poll(&mut pump, PollingStrategy::Offset(2), false).message_count,
        3
    );
}

// Proves next-polling resumes after the auto-committed offset, and the
// offset rules: beyond the end is 4100, deleting nothing is 3021.
#[test]
fn next_polling_with_auto_commit_and_offset_rules() {
    let io = SimIo::new(3);
    let mut pump = pump(&io, Durability::Persisted);
    let (reply, _answer) = channel();
    block_on(async {
        pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(4),
            reply,
        })
        .await;
        pump.commit().await;
    });
    assert_eq!(
        poll(&mut pump, PollingStrategy::Next, true).message_count,
        4
    );
    assert_eq!(
        poll(&mut pump, PollingStrategy::Next, true).message_count,
        0
    );
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::GetOffset {
        key: KEY,
        consumer: CONSUMER,
        reply,
    }));
    let stored = answer.try_recv().unwrap().unwrap().unwrap();
    assert_eq!(
        stored,
        StoredOffset {
            current_offset: 3,
            stored_offset: 3
        }
    );

    let (reply, answer) = channel();
    let op = PartitionOp::StoreOffset {
        key: KEY,
        consumer: CONSUMER,
        offset: 99,
        reply,
    };
    block_on(pump.apply(op));
    assert_eq!(
        answer.try_recv().unwrap().unwrap_err().status(),
        Status::InvalidOffset
    );
    let (reply, answer) = channel();
    let op = PartitionOp::StoreOffset {
        key: KEY,
        consumer: CONSUMER,
        offset: 1,
        reply,
    };
    block_on(async {
        pump.apply(op).await;
        pump.commit().await;
    });
    answer.try_recv().unwrap().unwrap();
    assert_eq!(
        poll(&mut pump, PollingStrategy::Next, false).message_count,
        2
    );

    let other = ConsumerKey {
        kind: ConsumerKind::Group,
        id: 1,
    };
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::DeleteOffset {
        key: KEY,
        consumer: other,
        reply,
    }));
    assert_eq!(
        answer.try_recv().unwrap().unwrap_err().status(),
        Status::ConsumerOffsetNotFound
    );
}

/// Stores `offset` for consumer `id` and commits; the answer's status.
fn store_for(pump: &mut Pump<SimIo>, id: u32, offset: u64) -> Result<(), Status> {
    let (reply, answer) = channel();
    let consumer = ConsumerKey {
        kind: ConsumerKind::Consumer,
        id,
    };
    block_on(async {
        pump.apply(PartitionOp::StoreOffset {
            key: KEY,
            consumer,
            offset,
            reply,
        })
        .await;
        pump.commit().await;
    });
    answer
        .try_recv()
        .expect("answered")
        .map(drop)
        .map_err(|error| error.status())
}

// Proves the per-partition bound on stored consumer offsets
// (`limits.max_consumer_offsets_per_partition`, 3 in these tests): a
// fourth consumer is refused with TooManyConsumerOffsets (also by an
// auto-committing poll, which then returns nothing), consumers that have
// one may still move it, and a deleted one makes room; refusals counted.
#[test]
fn consumer_offsets_per_partition_are_bounded() {
    let io = SimIo::new(5);
    let mut pump = pump(&io, Durability::Replicated);
    append_committed(&mut pump, KEY, 4);
    for id in 1..=3 {
        assert_eq!(store_for(&mut pump, id, 1), Ok(()));
    }
    assert_eq!(
        store_for(&mut pump, 4, 1),
        Err(Status::TooManyConsumerOffsets)
    );
    assert_eq!(store_for(&mut pump, 2, 3), Ok(()), "an existing one moves");
    let (reply, answer) = channel();
    let request = PollRequest {
        consumer: Some(ConsumerKey {
            kind: ConsumerKind::Consumer,
            id: 9,
        }),
        strategy: PollingStrategy::First,
        count: 10,
        auto_commit: true,
        bytes_max: u64::MAX,
    };
    block_on(pump.apply(PartitionOp::Poll {
        key: KEY,
        request,
        reply,
    }));
    assert_eq!(
        answer.try_recv().expect("answered").unwrap_err().status(),
        Status::TooManyConsumerOffsets
    );
    assert_eq!(pump.counters.offsets_refused, 2);
    let (reply, answer) = channel();
    block_on(async {
        pump.apply(PartitionOp::DeleteOffset {
            key: KEY,
            consumer: ConsumerKey {
                kind: ConsumerKind::Consumer,
                id: 1,
            },
            reply,
        })
        .await;
        pump.commit().await;
    });
    answer.try_recv().expect("answered").expect("deleted");
    assert_eq!(store_for(&mut pump, 4, 1), Ok(()), "room again");
}

// Proves purge deletes messages and offsets and restarts offsets at 0,
// and that an unknown partition is 3007.
#[test]
fn purge_resets_and_unknown_partitions_are_not_found() {
    let io = SimIo::new(4);
    let mut pump = pump(&io, Durability::Replicated);
    let (reply, _answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: KEY,
        batch: batch(3),
        reply,
    }));
    block_on(pump.commit());
    poll(&mut pump, PollingStrategy::Next, true);
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::Purge { key: KEY, reply }));
    answer.try_recv().unwrap().unwrap();
    assert_eq!(
        poll(&mut pump, PollingStrategy::First, false).message_count,
        0
    );
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: KEY,
        batch: batch(1),
        reply,
    }));
    block_on(pump.commit());
    assert_eq!(answer.try_recv().unwrap().unwrap().base_offset, 0);
    assert_eq!(
        poll(&mut pump, PollingStrategy::Next, false).message_count,
        1
    );

    let missing = PartitionKey {
        stream: 9,
        topic: 9,
        partition: 9,
        storage_id: 9,
    };
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: missing,
        batch: batch(1),
        reply,
    }));
    assert_eq!(
        answer.try_recv().unwrap().unwrap_err().status(),
        Status::PartitionNotFound
    );
}

// Regression (pump simulation): on a `replicated` topic with `persisted`
// consumer offsets, an offset can be durable while the messages it points
// at are not. After a power loss the offset must not point past the
// recovered log, or `Next` would skip the messages appended next.
#[test]
fn a_consumer_offset_past_the_recovered_log_is_clamped_on_open() {
    let io = SimIo::new(6);
    let settings = PartitionSettings {
        durability: Durability::Replicated,
        offset_durability: Durability::Persisted,
        ..PartitionSettings::default()
    };
    let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(1_000_000)), storage());
    block_on(pump.open(KEY, settings)).unwrap();
    let (reply, _answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: KEY,
        batch: batch(5),
        reply,
    }));
    block_on(pump.commit());
    let (reply, answer) = channel();
    block_on(async {
        pump.apply(PartitionOp::StoreOffset {
            key: KEY,
            consumer: CONSUMER,
            offset: 4,
            reply,
        })
        .await;
        pump.commit().await;
    });
    answer.try_recv().unwrap().unwrap();
    io.crash();
    let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(2_000_000)), storage());
    block_on(pump.open(KEY, settings)).unwrap();
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::GetOffset {
        key: KEY,
        consumer: CONSUMER,
        reply,
    }));
    assert_eq!(answer.try_recv().unwrap().unwrap(), None);
    let (reply, _answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: KEY,
        batch: batch(3),
        reply,
    }));
    block_on(pump.commit());
    assert_eq!(
        poll(&mut pump, PollingStrategy::Next, false).message_count,
        3
    );
}

// Proves size retention: a partition over 90 % of its `max_topic_size`
// share loses its oldest sealed segments until it is under, the active
// segment stays even when it alone is over, and the newest data stays
// readable.
#[test]
fn retention_trims_the_oldest_sealed_segments_to_the_size_share() {
    let io = SimIo::new(6);
    let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(1_000_000)), storage());
    // One 10-message batch is about 1.7 KiB; 4 KiB segments hold 2-3.
    let settings = PartitionSettings {
        durability: Durability::Replicated,
        segment_size_bytes: 4096,
        max_size_bytes: Some(10_000),
        ..PartitionSettings::default()
    };
    block_on(pump.open(KEY, settings)).unwrap();
    for _ in 0..30 {
        let (reply, answer) = channel();
        block_on(pump.apply(PartitionOp::Append {
            key: KEY,
            batch: batch(10),
            reply,
        }));
        block_on(pump.commit());
        answer.try_recv().unwrap().unwrap();
    }
    let before = pump.partitions[&KEY].log.stats();
    assert!(before.bytes > 40_000, "{before:?}");
    assert!(before.segments > 10, "{before:?}");

    block_on(pump.apply(PartitionOp::RetentionTick));
    let after = pump.partitions[&KEY].log.stats();
    assert!(
        after.bytes <= 9_000,
        "trimmed to 90 % of the share: {after:?}"
    );
    assert!(after.first_offset > 0);
    assert_eq!(after.next_offset, 300, "the newest messages stay");
    let newest = poll(&mut pump, PollingStrategy::Last, false);
    assert_eq!(newest.message_count, 100.min(after.messages as u32));

    // A share smaller than the active segment: only sealed ones go.
    pump.partitions
        .get_mut(&KEY)
        .unwrap()
        .settings
        .max_size_bytes = Some(1);
    block_on(pump.apply(PartitionOp::RetentionTick));
    let last = pump.partitions[&KEY].log.stats();
    assert_eq!(last.segments, 1, "{last:?}");
    assert_eq!(last.next_offset, 300);
}

// Proves a failed fsync fails every acknowledgement waiting on it and
// makes the pump fatal (so the daemon stops instead of lying).
#[test]
fn a_failed_fsync_fails_waiting_acks_and_is_fatal() {
    let io = SimIo::new(5);
    let mut pump = pump(&io, Durability::Persisted);
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: KEY,
        batch: batch(2),
        reply,
    }));
    io.fail_next_fsync();
    block_on(pump.commit());
    assert!(answer.try_recv().unwrap().is_err());
    assert!(pump.fatal().is_some());
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key: KEY,
        batch: batch(1),
        reply,
    }));
    assert!(matches!(
        answer.try_recv().unwrap(),
        Err(PumpError::Stopping)
    ));
}

/// Appends `messages` messages to `key` and commits.
fn append_committed(pump: &mut Pump<SimIo>, key: PartitionKey, messages: usize) {
    let (reply, answer) = channel();
    block_on(pump.apply(PartitionOp::Append {
        key,
        batch: batch(messages),
        reply,
    }));
    block_on(pump.commit());
    answer.try_recv().unwrap().unwrap();
}

fn answer_of<T: std::fmt::Debug>(
    pump: &mut Pump<SimIo>,
    make: impl FnOnce(Reply<T>) -> PartitionOp,
) -> Result<T, PumpError> {
    let (reply, answer) = channel();
    block_on(pump.apply(make(reply)));
    answer.try_recv().unwrap()
}

// Proves a removed partition's directory leaves its place at once (into
// the trash, removed by the janitor's ticks), a late open of the removed
// key does not bring it back, and a partition created with the same wire
// ids (a new storage id) starts empty, whichever arrives first.
#[test]
fn remove_then_create_with_the_same_ids_serves_nothing_old() {
    let io = SimIo::new(7);
    let mut pump = pump(&io, Durability::Persisted);
    append_committed(&mut pump, KEY, 10);
    let recreated = PartitionKey {
        storage_id: 1,
        ..KEY
    };
    let settings = PartitionSettings::default();
    // The open of the new partition reaches the shard first.
    answer_of(&mut pump, |reply| PartitionOp::Open {
        key: recreated,
        settings,
        reply,
    })
    .unwrap();
    answer_of(&mut pump, |reply| PartitionOp::Remove { key: KEY, reply }).unwrap();
    let old_dir = KEY.dir(Path::new("/data"));
    assert!(!io.dir_exists(&old_dir));
    assert_eq!(pump.trash_stats().entries, 1);
    assert!(pump.trash_stats().bytes > 0);
    // A settings refresh that lost the race with the delete.
    answer_of(&mut pump, |reply| PartitionOp::Open {
        key: KEY,
        settings,
        reply,
    })
    .unwrap();
    assert!(!pump.holds(&KEY));
    assert!(!io.dir_exists(&old_dir));
    let error = answer_of(&mut pump, |reply| PartitionOp::Purge { key: KEY, reply }).unwrap_err();
    assert_eq!(error.status(), Status::PartitionNotFound);
    let request = PollRequest {
        consumer: None,
        strategy: PollingStrategy::Offset(0),
        count: 100,
        auto_commit: false,
        bytes_max: u64::MAX,
    };
    let polled = answer_of(&mut pump, |reply| PartitionOp::Poll {
        key: recreated,
        request,
        reply,
    })
    .unwrap();
    assert_eq!(polled.message_count, 0);
    // The janitor empties the trash.
    for _ in 0..10 {
        block_on(pump.apply(PartitionOp::TrashTick));
    }
    let stats = pump.trash_stats();
    assert_eq!((stats.entries, stats.removed_entries), (0, 1));
    assert!(io.files_under(Path::new("/data/trash")).is_empty());
}

// Proves a purge and a segment deletion that cannot move their data to the
// trash (an undeletable directory or segment) are refused without harm:
// not fatal, nothing changed, the partition keeps working; and a removal
// that cannot rename its directory removes it in place.
#[test]
fn undeletable_data_refuses_purge_and_segment_deletion_without_harm() {
    let io = SimIo::new(8);
    let clock = SimClock::new(1_000_000);
    let mut pump = Pump::new(io.clone(), Rc::new(clock.clone()), storage());
    let settings = PartitionSettings {
        segment_size_bytes: 2048,
        ..PartitionSettings::default()
    };
    block_on(pump.open(KEY, settings)).unwrap();
    for _ in 0..6 {
        append_committed(&mut pump, KEY, 5);
    }
    let dir = KEY.dir(Path::new("/data"));
    let before = pump.report();
    assert!(before[0].stats.segments >= 3, "{before:?}");
    io.set_immutable(&dir, true);
    let error = answer_of(&mut pump, |reply| PartitionOp::Purge { key: KEY, reply }).unwrap_err();
    assert_eq!(error.status(), Status::Error);
    assert!(pump.fatal().is_none());
    io.set_immutable(&dir, false);
    let oldest = iggyd_storage::segment::log_path(&dir, 0);
    io.set_immutable(&oldest, true);
    let error = answer_of(&mut pump, |reply| PartitionOp::DeleteSegments {
        key: KEY,
        count: 2,
        reply,
    })
    .unwrap_err();
    assert_eq!(error.status(), Status::Error);
    assert!(pump.fatal().is_none());
    assert_eq!(pump.report(), before);
    io.set_immutable(&oldest, false);
    append_committed(&mut pump, KEY, 1);
    let deleted = answer_of(&mut pump, |reply| PartitionOp::DeleteSegments {
        key: KEY,
        count: 1,
        reply,
    })
    .unwrap();
    assert_eq!(deleted.segments, 1);
    // An undeletable directory: the delete still succeeds (it is durable
    // in metadata); the directory is removed where it is once it can be.
    io.set_immutable(&dir, true);
    answer_of(&mut pump, |reply| PartitionOp::Remove { key: KEY, reply }).unwrap();
    assert!(pump.fatal().is_none());
    block_on(pump.apply(PartitionOp::TrashTick));
    let stats = pump.trash_stats();
    assert_eq!((stats.entries, stats.failing), (1, 1), "{stats:?}");
    io.set_immutable(&dir, false);
    // Retried only after its backoff.
    block_on(pump.apply(PartitionOp::TrashTick));
    assert_eq!(pump.trash_stats().entries, 1);
    clock.advance(120_000_000);
    for _ in 0..20 {
        block_on(pump.apply(PartitionOp::TrashTick));
    }
    assert_eq!(pump.trash_stats().entries, 0);
    assert!(!io.dir_exists(&dir));
    assert!(io.files_under(Path::new("/data")).is_empty());
}

// Proves a poll that must wait for a disk read does not hold up its shard:
// it is parked while the read is in flight, an append to another partition
// of the same pump is acknowledged meanwhile, and the poll is answered with
// its messages once the read completes.
#[test]
fn a_poll_waiting_for_the_disk_is_parked_while_other_partitions_go_on() {
    let io = SimIo::new(11);
    {
        let mut pump = pump(&io, Durability::Replicated);
        for _ in 0..3 {
            append_committed(&mut pump, KEY, 10);
        }
        block_on(pump.drain());
    }
    // Reopened: nothing of KEY is in memory, so a poll reads the disk.
    let mut pump = pump_reopen(&io, Durability::Replicated);
    let other = PartitionKey {
        partition: 1,
        storage_id: 1,
        ..KEY
    };
    let settings = PartitionSettings {
        durability: Durability::Replicated,
        ..PartitionSettings::default()
    };
    block_on(pump.open(other, settings)).unwrap();
    io.hold_reads(true);
    let (reply, polled) = channel();
    let request = PollRequest {
        consumer: Some(CONSUMER),
        strategy: PollingStrategy::First,
        count: 100,
        auto_commit: true,
        bytes_max: u64::MAX,
    };
    block_on(pump.apply(PartitionOp::Poll {
        key: KEY,
        request,
        reply,
    }));
    block_on(pump.commit());
    assert!(polled.try_recv().is_err(), "answered before its read");
    assert_eq!(pump.counters.polls_parked, 1);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(pump.poll_parked(&mut context).is_pending());

    // Acknowledged (or the helper's unwrap fails) while the read is held.
    append_committed(&mut pump, other, 5);
    assert!(polled.try_recv().is_err());

    io.hold_reads(false);
    assert!(pump.poll_parked(&mut context).is_ready());
    block_on(pump.resume_parked(false));
    block_on(pump.commit());
    let result = polled.try_recv().unwrap().unwrap();
    assert_eq!(result.message_count, 30);
    assert!(
        pump.poll_parked(&mut context).is_pending(),
        "nothing left parked"
    );
    // The resumed poll committed its consumer's offset, as any poll does.
    assert_eq!(
        poll(&mut pump, PollingStrategy::Next, false).message_count,
        0
    );
}

// Proves many partitions open together (more than open at once): each is
// taken in with what it held, one already held only takes the new
// settings, a removed one stays removed, one listed twice opens once, and
// one whose directory takes no files fails alone, named with its error.
#[test]
fn many_partitions_open_together_and_fail_alone() {
    let io = SimIo::new(8);
    let key = |storage_id: u64| PartitionKey {
        partition: storage_id as u32,
        storage_id,
        ..KEY
    };
    let count = 2 * crate::limits::PARTITION_OPENS_IN_FLIGHT as u64 + 5;
    let settings = PartitionSettings::default();
    let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(1_000_000)), storage());
    let wanted: Vec<_> = (0..count).map(|id| (key(id), settings)).collect();
    assert!(block_on(pump.open_many(wanted.clone())).is_empty());
    assert_eq!(pump.partitions(), count as usize);
    for id in (0..count).step_by(7) {
        append_committed(&mut pump, key(id), id as usize + 1);
    }
    block_on(pump.drain());
    drop(pump);

    let mut pump = Pump::new(io.clone(), Rc::new(SimClock::new(2_000_000)), storage());
    block_on(pump.open(key(1), settings)).unwrap();
    answer_of(&mut pump, |reply| PartitionOp::Remove {
        key: key(2),
        reply,
    })
    .unwrap();
    // Partition `count`'s directory exists and takes no new files.
    let blocked = key(count);
    let blocked_dir = blocked.dir(Path::new("/data"));
    block_on(io.create_dir_all(&blocked_dir)).unwrap();
    io.set_immutable(&blocked_dir, true);
    let refreshed = PartitionSettings {
        segment_size_bytes: settings.segment_size_bytes / 2,
        ..settings
    };
    let mut wanted = wanted;
    wanted[1].1 = refreshed;
    wanted.push((blocked, settings));
    // Listed twice: opened once.
    wanted.push(wanted[3]);
    let failed = block_on(pump.open_many(wanted));
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].0, blocked);
    assert!(!pump.holds(&key(2)), "a removed partition stays removed");
    assert!(!io.dir_exists(&key(2).dir(Path::new("/data"))));
    assert_eq!(pump.partitions(), count as usize - 1);
    assert_eq!(pump.partitions[&key(1)].settings, refreshed);
    for id in (0..count).filter(|id| *id != 2) {
        let held = if id % 7 == 0 { id + 1 } else { 0 };
        let request = PollRequest {
            consumer: None,
            strategy: PollingStrategy::Offset(0),
            count: 1000,
            auto_commit: false,
            bytes_max: u64::MAX,
        };
        let polled = answer_of(&mut pump, |reply| PartitionOp::Poll {
            key: key(id),
            request,
            reply,
        })
        .unwrap();
        assert_eq!(u64::from(polled.message_count), held, "partition {id}");
    }
}
