//! Tests of the metadata store's persistence: torn tails truncated and
//! reported, mid-journal corruption as a typed error, snapshot and journal
//! recovery, members reset on recovery, and the `std::fs` backend's round
//! trip.

use super::command::MetadataCommand as C;
use super::io::{MetadataIo, SimDirIo, StdIo};
use super::journal::JOURNAL_FILE;
use super::model::MemberKey;
use super::snapshot::SNAPSHOT_FILE;
use super::store::{ExecuteError, MetadataStore, StoreError};
use super::tests::{id, topic_command};

fn store_with_streams(count: u32) -> MetadataStore<SimDirIo> {
    let (mut store, _) = MetadataStore::open_with_interval(SimDirIo::new(1), 1_000).unwrap();
    for index in 0..count {
        store
            .execute(C::CreateStream {
                name: format!("s{index}"),
                created_at_us: 1,
            })
            .unwrap();
    }
    store
}

// Proves a torn last append (the disk filled up mid-write) is truncated at
// recovery and reported, and earlier commands survive; the store poisons
// itself after a failed append.
#[test]
fn torn_tail_is_truncated_and_reported() {
    let mut store = store_with_streams(3);
    let used = store.io_mut().io.used_bytes();
    store.io_mut().io.set_capacity(Some(used + 10));
    let failed = store.execute(C::CreateStream {
        name: "torn".into(),
        created_at_us: 1,
    });
    assert!(matches!(failed, Err(ExecuteError::Fatal(_))));
    assert!(store.is_poisoned());
    assert!(matches!(
        store.execute(C::CreateStream {
            name: "after".into(),
            created_at_us: 1
        }),
        Err(ExecuteError::Fatal(StoreError::Poisoned))
    ));
    let io = store.into_io();
    io.io.set_capacity(None);
    let torn_len = io.contents(JOURNAL_FILE).unwrap().len();
    let (recovered, report) = MetadataStore::open(io).unwrap();
    assert_eq!(recovered.metadata().streams_count(), 3);
    let torn = report.torn_tail.unwrap();
    assert_eq!(torn.bytes, 10);
    let io = recovered.into_io();
    assert_eq!(io.contents(JOURNAL_FILE).unwrap().len(), torn_len - 10);
    // The next append continues at the right sequence number.
    let (mut again, _) = MetadataStore::open(io).unwrap();
    again
        .execute(C::CreateStream {
            name: "next".into(),
            created_at_us: 1,
        })
        .unwrap();
    assert_eq!(again.last_seq(), 4);
}

// Proves a bit flip inside a middle record stops recovery with a typed
// error instead of dropping later acknowledged commands.
#[test]
fn mid_journal_corruption_is_a_typed_error() {
    let store = store_with_streams(3);
    let io = store.into_io();
    io.flip_bit(JOURNAL_FILE, 20, 3);
    let error = MetadataStore::open(io).unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::Journal(super::journal::JournalError::CorruptRecord { offset: 0, .. })
        ),
        "{error}"
    );
}

// Proves snapshot + journal recovery: a snapshot is taken every N commands,
// the journal is cut, later commands are replayed on top; a stale journal
// left by a crash between snapshot and cut is skipped by sequence number;
// a damaged snapshot is a typed error.
#[test]
fn snapshot_and_journal_recovery() {
    let (mut store, _) = MetadataStore::open_with_interval(SimDirIo::new(1), 4).unwrap();
    for index in 0..6 {
        store
            .execute(C::CreateStream {
                name: format!("s{index}"),
                created_at_us: 1,
            })
            .unwrap();
    }
    let live = store.metadata().clone();
    let io = store.into_io();
    assert!(io.contents(SNAPSHOT_FILE).is_some());
    let (recovered, report) = MetadataStore::open_with_interval(io.clone(), 4).unwrap();
    assert_eq!(report.snapshot_seq, Some(4));
    assert_eq!(report.replayed, 2);
    assert_eq!(recovered.metadata(), &live);

    // Crash between snapshot rename and journal cut: the journal still
    // holds records 1..=4 that the snapshot covers.
    let (mut store, _) = MetadataStore::open_with_interval(SimDirIo::new(2), 1_000).unwrap();
    for index in 0..4 {
        store
            .execute(C::CreateStream {
                name: format!("s{index}"),
                created_at_us: 1,
            })
            .unwrap();
    }
    let journal = store.io_mut().contents(JOURNAL_FILE).unwrap();
    store.snapshot().unwrap();
    store
        .execute(C::CreateStream {
            name: "s4".into(),
            created_at_us: 1,
        })
        .unwrap();
    let io = store.into_io();
    let tail = io.contents(JOURNAL_FILE).unwrap();
    let mut stale = journal;
    stale.extend(tail);
    io.set_contents(JOURNAL_FILE, stale);
    let (recovered, report) = MetadataStore::open(io.clone()).unwrap();
    assert_eq!(report.skipped, 4);
    assert_eq!(report.replayed, 1);
    assert_eq!(recovered.metadata().streams_count(), 5);

    io.flip_bit(SNAPSHOT_FILE, 40, 0);
    assert!(matches!(
        MetadataStore::open(io).unwrap_err(),
        StoreError::Snapshot(_)
    ));
}

// Proves group members do not survive a restart: recovery journals a
// ResetMembers, and a second recovery replays it.
#[test]
fn members_are_reset_on_recovery() {
    let (mut store, _) = MetadataStore::open(SimDirIo::new(1)).unwrap();
    store
        .execute(C::CreateStream {
            name: "s".into(),
            created_at_us: 1,
        })
        .unwrap();
    store.execute(topic_command(id(0), "t", 2, 1)).unwrap();
    store
        .execute(C::CreateConsumerGroup {
            stream: id(0),
            topic: id(0),
            name: "g".into(),
        })
        .unwrap();
    store
        .execute(C::JoinConsumerGroup {
            stream: id(0),
            topic: id(0),
            group: id(0),
            member: MemberKey(7),
        })
        .unwrap();
    let (recovered, report) = MetadataStore::open(store.into_io()).unwrap();
    assert!(report.members_reset);
    let group = recovered
        .metadata()
        .group(&id(0), &id(0), &id(0))
        .unwrap()
        .2
        .clone();
    assert!(group.members.is_empty());
    let (again, report) = MetadataStore::open(recovered.into_io()).unwrap();
    assert!(!report.members_reset);
    assert_eq!(again.last_seq(), 5);
}

// Proves the std::fs backend end to end in a temporary directory: append,
// snapshot (atomic replace), truncate and recovery.
#[test]
fn std_io_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let io = StdIo::open(dir.path().join("metadata")).unwrap();
    let (mut store, _) = MetadataStore::open_with_interval(io, 3).unwrap();
    for index in 0..5 {
        store
            .execute(C::CreateStream {
                name: format!("s{index}"),
                created_at_us: 1,
            })
            .unwrap();
    }
    let live = store.metadata().clone();
    drop(store);
    let mut io = StdIo::open(dir.path().join("metadata")).unwrap();
    assert!(io.read(SNAPSHOT_FILE).unwrap().is_some());
    assert!(
        !dir.path()
            .join("metadata")
            .join("metadata.snapshot.tmp")
            .exists()
    );
    let (recovered, report) = MetadataStore::open_with_interval(io, 3).unwrap();
    assert_eq!(report.snapshot_seq, Some(3));
    assert_eq!(recovered.metadata(), &live);
}

// Proves `export` and `replace` (a cluster node's metadata snapshot): an
// empty in-memory store replaced by another's export ends equal to it (the
// same metadata, the same next ids, the same export) and goes on executing
// after it, and bytes that do not check (a flipped byte, a cut) are
// refused and change nothing.
#[test]
fn a_store_replaced_by_an_export_equals_it_and_bad_bytes_change_nothing() {
    let mut source = store_with_streams(5);
    source.execute(topic_command(id(0), "t", 3, 1)).unwrap();
    let exported = source.export().unwrap();
    assert_eq!(exported.next_storage_id, 3);
    let (mut target, _) = MetadataStore::open(StdIo::in_memory("/replaced")).unwrap();
    let before = target.export().unwrap();
    let mut flipped = exported.bytes.clone();
    flipped[40] ^= 1;
    let cut = &exported.bytes[..exported.bytes.len() - 1];
    for bad in [&flipped[..], cut] {
        assert!(matches!(target.replace(bad), Err(StoreError::Snapshot(_))));
        assert_eq!(target.export().unwrap(), before);
        assert!(!target.is_poisoned());
    }
    target.replace(&exported.bytes).unwrap();
    assert_eq!(target.metadata(), source.metadata());
    assert_eq!(target.export().unwrap(), exported);
    let after = || C::CreateStream {
        name: "after".into(),
        created_at_us: 2,
    };
    source.execute(after()).unwrap();
    target.execute(after()).unwrap();
    assert_eq!(target.export().unwrap(), source.export().unwrap());
}
