//! A purge that fails after its rename into the trash (issue 11 item 11),
//! on the simulated disk: the partition is poisoned, and its stats, offsets
//! and reads answer without a panic (release builds abort on one).

use std::path::PathBuf;
use std::rc::Rc;

use super::StorageError;
use super::buf::BufferPool;
use super::io::{Access, StorageIo};
use super::partition_log::{Clock, PartitionConfig, PartitionLog};
use super::sim::{SimClock, SimIo, block_on};
use super::trash::{Trash, TrashStart};
use iggyd_wire::batch::{MessageSpec, ValidBatch, encode_producer_batch};

fn batch(messages: usize) -> ValidBatch {
    let specs: Vec<MessageSpec> = (0..messages)
        .map(|index| MessageSpec {
            id: index as u128 + 1,
            timestamp_delta: 0,
            payload: vec![7; 100],
            user_headers: vec![],
        })
        .collect();
    let bytes = encode_producer_batch(1, &specs);
    let len = bytes.len();
    ValidBatch::new(bytes, 0..len).unwrap()
}

// Segments are written (several, by rotation), the purge moves the
// directory into the trash and then its directory fsync fails; stats,
// first/next offsets and reads of the poisoned partition (whose files are
// gone from where it knew them) answer, and appends are refused.
#[test]
fn a_purge_failing_after_its_rename_does_not_panic() {
    for access in [Access::Buffered, Access::Direct] {
        let io = SimIo::new(5);
        let dir = PathBuf::from("/data/streams/1/topics/1/partitions/0");
        block_on(async {
            io.create_dir_all(&dir).await.unwrap();
            let config = PartitionConfig {
                partition_id: 0,
                segment_size_bytes: 4096,
                index_sample_every: 1,
                access,
                read_window_bytes: crate::limits::READ_WINDOW_BYTES,
            };
            let clock: Rc<dyn Clock> = Rc::new(SimClock::new(1_000));
            let mut log =
                PartitionLog::open(io.clone(), &dir, config, clock, BufferPool::new(1 << 20))
                    .await
                    .unwrap();
            for _ in 0..20 {
                log.append_and_write(&batch(5)).await.unwrap();
            }
            log.sync().await.unwrap();
            assert!(log.stats().segments > 1);
            let mut trash = Trash::new(io.clone(), &PathBuf::from("/data"), TrashStart::default());
            io.fail_next_fsync();
            assert!(log.purge(&mut trash).await.is_err());
            assert!(!io.dir_exists(&dir), "the data went to the trash");
            let stats = log.stats();
            assert!(log.first_offset() <= log.written_next_offset());
            assert!(stats.segments > 0);
            // Answers (an error or what memory still holds), never a panic.
            let _ = log.read_by_offset(0, 10, 1 << 20).await;
            let _ = log.read_last(10, 1 << 20).await;
            assert!(matches!(
                log.append(&batch(1)).await,
                Err(StorageError::Poisoned { .. })
            ));
        });
    }
}
