//! The entry cache against the files it stands in for: a seeded run of
//! appends (data entries proposed with stale offsets and clocks behind the
//! log's, blank, membership and offsets entries), truncations, purges and
//! changes the cache is not told of, on the simulated disk, with a budget
//! small enough that eviction runs all the time. Every read answers what
//! the files answer, and most are served from memory.

use super::super::raft::{append_entry, read_entries};
use super::*;
use iggyd_storage::raft::RaftFiles;
use iggyd_storage::sim::{SimClock, SimIo, SimRng, block_on};
use iggyd_storage::{BufferPool, Clock, PartitionConfig, PartitionLog};
use iggyd_wire::batch::{MessageSpec, encode_producer_batch, stamp};
use std::path::Path;
use std::rc::Rc;

const KEY: PartitionKey = PartitionKey {
    stream: 1,
    topic: 1,
    partition: 0,
    storage_id: 9,
};

/// A batch as a leader proposes it: stamped for `base_offset` (stale when
/// another proposal joined first) at `timestamp`.
fn proposal(base_offset: u64, messages: u32, timestamp: u64, tag: u8) -> Vec<u8> {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: u128::from(index) + 1,
            timestamp_delta: index,
            payload: vec![tag; 40 + index as usize],
            user_headers: Vec::new(),
        })
        .collect();
    let mut bytes = encode_producer_batch(timestamp, &specs);
    stamp(&mut bytes, 3, base_offset, timestamp).expect("a fresh batch stamps");
    bytes
}

struct Files {
    files: RaftFiles<SimIo>,
    log: PartitionLog<SimIo>,
}

fn open(io: &SimIo) -> Files {
    let config = PartitionConfig::new(3, 4 * 1024).with_read_window(4 * 1024);
    let clock: Rc<dyn Clock> = Rc::new(SimClock::new(1_700_000_000_000_000));
    block_on(async {
        let dir = Path::new("/data/partitions/9");
        let mut log = PartitionLog::open(io.clone(), dir, config, clock, BufferPool::new(1 << 20))
            .await
            .expect("open the log");
        let (files, _) = RaftFiles::open(io.clone(), dir, &mut log)
            .await
            .expect("open the Raft files");
        Files { files, log }
    })
}

impl Files {
    /// What the files alone answer.
    fn read(&mut self, first: u64, end: u64, bytes_max: u64) -> Vec<StoredEntry> {
        let mut empty = EntryCache::new(0, 0);
        block_on(read_entries(
            &mut self.files,
            &mut self.log,
            &mut empty,
            KEY,
            (first, end),
            bytes_max,
        ))
        .expect("a read from the files")
    }
}

// Proves the cache answers every read as the files do, through appends,
// truncations, purges, evictions and changes it was not told of, and that
// it serves most reads (what it is for).
#[test]
fn the_cache_answers_every_read_as_the_files_do() {
    let mut served = 0u64;
    let mut reads = 0u64;
    for seed in 0..40 {
        let mut rng = SimRng::new(seed);
        let io = SimIo::new(seed);
        let mut files = open(&io);
        let mut cache = EntryCache::new(2_500, 12);
        let mut term = 1u64;
        let mut timestamp = 1_700_000_000_000_000u64;
        for step in 0..150 {
            let last = files.files.last().map_or(0, |(index, _)| index);
            let context = format!("seed {seed}, step {step}");
            match rng.below(10) {
                0..=3 => {
                    if rng.chance(1, 8) {
                        term += 1;
                    }
                    for _ in 0..rng.range(1, 4) {
                        let index = files.files.last().map_or(1, |(index, _)| index + 1);
                        let next = files.log.next_offset();
                        // A clock behind the log's, now and then.
                        timestamp = timestamp + 10 - rng.below(15);
                        let body = match rng.below(6) {
                            0 => StoredBody::Blank,
                            1 => StoredBody::Membership(vec![b'm'; rng.range(1, 30) as usize]),
                            2 => StoredBody::Offsets(vec![b'o'; rng.range(1, 30) as usize]),
                            _ => StoredBody::Data(
                                proposal(
                                    next.saturating_sub(rng.below(3)),
                                    rng.range(1, 6) as u32,
                                    timestamp,
                                    step as u8,
                                )
                                .into(),
                            ),
                        };
                        let entry = StoredEntry { index, term, body };
                        block_on(append_entry(
                            &mut files.files,
                            &mut files.log,
                            &mut cache,
                            KEY,
                            entry,
                        ))
                        .expect(&context);
                    }
                }
                4 => {
                    let purged = files.files.purged().map_or(0, |(index, _)| index);
                    let keep = rng.range(purged, last);
                    let told = rng.chance(4, 5);
                    if told {
                        cache.truncate_after(KEY, Some(keep));
                    }
                    block_on(async {
                        files.log.write_pending().await?;
                        files.files.truncate_after(&mut files.log, Some(keep)).await
                    })
                    .expect(&context);
                }
                5 if last > 2 && rng.chance(1, 3) => {
                    let through = rng.below(last - 1) + 1;
                    let term_of = block_on(files.files.term_of(through))
                        .expect(&context)
                        .unwrap_or(term);
                    cache.purge_through(KEY, through);
                    block_on(async {
                        files.log.write_pending().await?;
                        files.files.write_pending().await?;
                        files
                            .files
                            .purge_through(&files.log, (through, term_of))
                            .await
                    })
                    .expect(&context);
                }
                _ => {
                    // Mostly where replication reads: a few entries
                    // behind the last; now and then anywhere.
                    let first = if rng.chance(3, 4) {
                        last.saturating_sub(rng.below(5)) + 1
                    } else {
                        rng.below(last + 3)
                    };
                    let end = rng.range(first, last + 4);
                    let bytes_max = match rng.below(3) {
                        0 => 1,
                        1 => rng.range(100, 2_000),
                        _ => u64::MAX,
                    };
                    let expected = files.read(first, end, bytes_max);
                    let start = files.files.first_readable(first);
                    let cached = cache.read(KEY, files.files.last(), start, end, bytes_max);
                    reads += 1;
                    if let Some(cached) = cached {
                        served += 1;
                        assert_eq!(cached, expected, "{context}: read {first}..{end}");
                    }
                    let answered = block_on(read_entries(
                        &mut files.files,
                        &mut files.log,
                        &mut cache,
                        KEY,
                        (first, end),
                        bytes_max,
                    ))
                    .expect(&context);
                    assert_eq!(answered, expected, "{context}: read {first}..{end}");
                }
            }
            assert!(cache.bytes() <= 2_500, "{context}: over budget");
        }
    }
    // Three of four reads start near the end, where the cache holds.
    assert!(
        served * 2 > reads,
        "the cache served {served} of {reads} reads"
    );
}

// Proves the budget holds and the oldest entries of the shard go first,
// whichever partition they belong to, and that a partition's removal
// frees its bytes.
#[test]
fn the_shard_oldest_entries_go_first_and_a_removal_frees_its_bytes() {
    let other = PartitionKey {
        partition: 1,
        storage_id: 10,
        ..KEY
    };
    let data = |index: u64| StoredEntry {
        index,
        term: 1,
        body: StoredBody::Data(vec![7; 936].into()),
    };
    // Each entry costs 1,000 bytes against a 3,000-byte budget.
    let mut cache = EntryCache::new(3_000, 100);
    cache.insert(KEY, data(1));
    cache.insert(other, data(1));
    cache.insert(KEY, data(2));
    assert_eq!(cache.bytes(), 3_000);
    cache.insert(other, data(2));
    assert_eq!(cache.bytes(), 3_000);
    // KEY's entry 1 was the oldest.
    assert!(cache.read(KEY, Some((2, 1)), 1, 3, u64::MAX).is_none());
    let held = cache
        .read(KEY, Some((2, 1)), 2, 3, u64::MAX)
        .expect("entry 2");
    assert_eq!(held, vec![data(2)]);
    cache.remove(other);
    assert_eq!(cache.bytes(), 1_000);
    // An entry larger than the whole budget is not kept, nor its run.
    cache.insert(
        KEY,
        StoredEntry {
            index: 3,
            term: 1,
            body: StoredBody::Data(vec![0; 4_000].into()),
        },
    );
    assert_eq!(cache.bytes(), 0);
    // The count bound holds as well.
    let mut cache = EntryCache::new(usize::MAX, 3);
    for index in 1..=5 {
        cache.insert(
            KEY,
            StoredEntry {
                index,
                term: 1,
                body: StoredBody::Blank,
            },
        );
    }
    let held = cache.read(KEY, Some((5, 1)), 0, 10, u64::MAX);
    assert!(held.is_none(), "entries 1 and 2 are gone");
    let held = cache
        .read(KEY, Some((5, 1)), 3, 10, u64::MAX)
        .expect("3..=5");
    assert_eq!(held.len(), 3);
}
